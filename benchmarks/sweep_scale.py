"""A real sweep of hundreds of tiny trials: the driver's time per result at trials 6-15 against the last 10.

    .venv/bin/python -m benchmarks.sweep_scale --trials 200

Runs `python -m brnn_core sweep` in this process (embedded Ray, fifo, 2 at a time) with trials so small that Tune's
loop, not training, takes the time. Timers wrap `TuneController._on_training_result` (the driver's whole handling
of a result) and our `SweepCallback.on_trial_result`; nothing else is changed. Prints the medians, their ratio
(target <= 1.2: benchmarks/README.md) and the sweep's wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from brnn_core.cli import main as brnn_main
from brnn_core.sweep import runner
from brnn_core.sweep.records import Sweep, sweeps_dir

ROOT = Path(__file__).resolve().parent.parent


def timed(cls, name: str, sink: list) -> None:
    """Wrap cls.name so each call appends (trial_id, seconds) to sink."""
    original = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        trial = kwargs.get("trial", args[0] if args else None)
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            sink.append((trial.trial_id, time.perf_counter() - t0))

    setattr(cls, name, wrapper)


def by_trial(samples: list, order: dict[str, int]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for trial_id, seconds in samples:
        out.setdefault(order[trial_id], []).append(seconds)
    return out


def window(per_trial: dict[int, list[float]], numbers) -> float:
    return statistics.median([s for n in numbers for s in per_trial.get(n, [])])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    runner.prepare_env(None)  # what the CLI does first; ray reads it when imported, just below
    from ray.tune.execution.tune_controller import TuneController

    from brnn_core.sweep.steering import SweepCallback  # imports ray: only after prepare_env

    tune_side: list = []
    ours: list = []
    timed(TuneController, "_on_training_result", tune_side)
    timed(SweepCallback, "on_trial_result", ours)
    with tempfile.TemporaryDirectory(prefix="brnn-sweep-scale-") as tmp:
        runs_dir = Path(tmp) / "runs"
        t0 = time.perf_counter()
        code = brnn_main(["sweep", "--runs-dir", str(runs_dir), "--trials", str(args.trials),
                          "--concurrency", str(args.concurrency), "--name", "scale",
                          "--set", "hidden_size=8", "--set", "num_layers=1", "--set", "epochs=3",
                          "--set", "batch_size=1500", "--set", "eval_batch_size=500", "--set", "augment=off",
                          "--search", "lr=loguniform:0.001:0.1", "--keep-best", "3"])
        wall = time.perf_counter() - t0
        if not sweeps_dir(runs_dir).is_dir():
            raise SystemExit(f"the sweep did not start (exit {code})")
        sweep = Sweep(next(sweeps_dir(runs_dir).iterdir()))
        state = sweep.raw().get("state")
    if code != 0:
        raise SystemExit(f"the sweep ended {state} (exit {code})")
    ids = sorted({tid for tid, _ in tune_side})  # Tune's trial ids (<experiment>_00000, ...) sort in creation order
    order = {tid: k + 1 for k, tid in enumerate(ids)}
    n = len(ids)
    rows = {}
    for name, samples in (("Tune's handling of a result", tune_side), ("our callback's share", ours)):
        per = by_trial(samples, order)
        first, last = window(per, range(6, 16)), window(per, range(n - 9, n + 1))
        rows[name] = {"trials_6_15_ms": first * 1e3, "last_10_ms": last * 1e3, "ratio": last / first}
        print(f"{name:30s} trials 6-15: {first * 1e3:7.2f} ms   last 10: {last * 1e3:7.2f} ms   "
              f"ratio {last / first:.2f}")
    print(f"{n} trials, {len(tune_side)} results, {wall:.0f} s wall ({wall / n:.2f} s per trial), sweep {state}")
    if args.json:
        args.json.write_text(json.dumps({"trials": n, "results": len(tune_side), "wall_s": wall, "rows": rows},
                                        indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
