"""Sweep throughput: N short trials at several concurrencies, against the ideal and a single CLI run.

    python -m benchmarks.experiments.sweep_concurrency --trials 8 --concurrency 1,2 [--device cuda
        --gpus-per-trial 0.25]
    python -m benchmarks.experiments.sweep_concurrency --smoke     # 2 one-epoch trials at concurrency 1

Each sweep is `python -m brnn_core sweep` (embedded Ray, fifo, `--search seed=grid:...`: the same model N times):
wall time, Ray's start, the trials' time against perfect packing, per-trial samples/s against one CLI run of the
same config. Decision: docs/decisions/013-sweep-concurrency.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from brnn_core.runs.rundir import Run, list_runs
from brnn_core.sweep.records import list_sweeps

ROOT = Path(__file__).resolve().parents[2]


def model_sets(args) -> list[str]:
    return [f"dataset={args.dataset}", f"hidden_size={args.hidden}", f"num_layers={args.layers}",
            f"epochs={args.epochs}", f"device={args.device}", "cpu_threads=1"]


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "BRNN_PROGRESS": "plain", "PYTHONUNBUFFERED": "1"}


def trial_rate(run: Run) -> float:
    train = run.metrics()
    train = train[(train["split"] == "train") & train["samples_per_s"].notna()]
    return float(train["samples_per_s"].iloc[1:].median() if len(train) > 1 else train["samples_per_s"].median())


def run_sweep(args, concurrency: int, root: Path) -> dict:
    runs = root / f"c{concurrency}"
    seeds = ",".join(str(s) for s in range(args.trials))
    cmd = [sys.executable, "-m", "brnn_core", "sweep", "--runs-dir", str(runs), "--search", f"seed=grid:{seeds}",
           "--concurrency", str(concurrency), "--cpus-per-trial", "1", "--keep-all-checkpoints",
           *[a for s in model_sets(args) for a in ("--set", s)]]
    if args.gpus_per_trial:
        cmd += ["--gpus-per-trial", f"{args.gpus_per_trial:g}"]
    t0 = time.time()
    out = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True)
    wall = time.time() - t0
    if out.returncode != 0:
        raise SystemExit(f"sweep at concurrency {concurrency} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    sweep = list_sweeps(runs)[0]
    info = sweep.info()
    trials = sweep.trial_runs()
    spans = [(r.status()["started"], r.status()["ended"]) for r in trials]
    rates = [trial_rate(r) for r in trials]
    return {"concurrency": concurrency, "trials": len(trials), "wall_s": wall, "ray_start_s": info["created"] - t0,
            "trials_s": info["ended"] - info["created"], "trial_s": [e - s for s, e in spans],
            "trial_samples_per_s": statistics.median(rates),
            "aggregate_samples_per_s": concurrency * statistics.median(rates),
            "states": sorted({r.status()["state"] for r in trials})}


def single_run(args, root: Path) -> dict:
    runs = root / "single"
    cmd = [sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs),
           *[a for s in model_sets(args) for a in ("--set", s)]]
    t0 = time.time()
    out = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the single CLI run failed:\n{out.stdout[-3000:]}")
    run = list_runs(runs)[0]
    return {"wall_s": time.time() - t0, "trial_s": run.status()["ended"] - run.status()["started"],
            "samples_per_s": trial_rate(run)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--concurrency", default="1,2", help="comma-separated, e.g. 1,2,4,8")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--dataset", default="mnist-sample")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--gpus-per-trial", type=float, default=0.0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--smoke", action="store_true", help="2 trials of 1 epoch, hidden 8, concurrency 1; no file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.trials, args.concurrency, args.epochs, args.hidden = 2, "1", 1, 8
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="brnn-sweep-bench-") as tmp:
        single = single_run(args, Path(tmp))
        rows = [run_sweep(args, int(c), Path(tmp)) for c in args.concurrency.split(",")]
    load1 = os.getloadavg()
    base = next((r for r in rows if r["concurrency"] == 1), None)
    print(f"{args.trials} trials: {args.dataset}, hidden {args.hidden}, {args.layers} layer(s), {args.epochs} epochs, "
          f"{args.device}{f', {args.gpus_per_trial:g} GPU/trial' if args.gpus_per_trial else ''}; "
          f"load average {load0[0]:.2f} at start, {load1[0]:.2f} at end ({os.cpu_count()} cores)")
    print(f"single CLI run: {single['samples_per_s']:,.0f} samples/s, {single['trial_s']:.1f} s")
    print("conc  wall_s  ray_start_s  trials_s  ideal_s  efficiency  trial samples/s (vs single)  aggregate")
    for r in rows:
        ideal = sum(base["trial_s"]) / r["concurrency"] if base else float("nan")
        r["ideal_s"], r["efficiency"] = ideal, ideal / r["trials_s"]
        print(f"{r['concurrency']:>4}  {r['wall_s']:6.1f}  {r['ray_start_s']:11.1f}  {r['trials_s']:8.1f}  "
              f"{ideal:7.1f}  {r['efficiency']:10.2f}  {r['trial_samples_per_s']:9,.0f} "
              f"({r['trial_samples_per_s'] / single['samples_per_s']:.2f})  {r['aggregate_samples_per_s']:13,.0f}")
    if args.smoke:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{time.strftime('%Y-%m-%d_%H%M%S')}_sweep_concurrency.json"
    path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "load_average": [load0, load1],
                                "cores": os.cpu_count(), "single": single, "sweeps": rows}, indent=2))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
