"""The driver's bookkeeping per Tune result as trials pile up: early trials against the last ones.

    python -m benchmarks.experiments.sweep_bookkeeping --trials 200
    python -m benchmarks.experiments.sweep_bookkeeping --smoke     # 16 trials: the code path only

Builds N trial run directories (benchmarks/sweep_page.py's `make_sweep`) and feeds `steering.SweepCallback` one
result and one end per trial, timing each call; beside it, ranking by re-reading every trial's metrics.csv
(`records.best_trial`). Only the bookkeeping is timed. Decision: docs/decisions/014-sweep-bookkeeping.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.sweep_page import SWEEP_ID, make_sweep
from brnn_core.sweep.records import Sweep, best_trial, sweeps_dir
from brnn_core.sweep.steering import SweepCallback, SweepControl


class FakeTrial:
    def __init__(self, trial_id: str):
        self.trial_id = trial_id
        self.error_file = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--smoke", action="store_true", help="16 trials (the fewest the two medians need)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.trials = 16
    with tempfile.TemporaryDirectory(prefix="brnn-bookkeeping-") as tmp:
        runs_dir = Path(tmp) / "runs"
        make_sweep(runs_dir, args.trials)
        sweep = Sweep(sweeps_dir(runs_dir) / SWEEP_ID)
        callback = SweepCallback(SweepControl(sweep.path), keep_best=3, printer=lambda line: None)
        new, old = [], []
        for k in range(args.trials):
            trial = FakeTrial(f"{k:05d}")
            result = {"epoch": 3, "val_loss": 0.5 + (k % 17) / 10, "val_accuracy": 0.9,
                      "run_id": f"{SWEEP_ID}-t{k:02d}"}
            t0 = time.perf_counter()
            callback.on_trial_result(0, [], trial, result)
            callback.on_trial_complete(0, [], trial)
            new.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            best_trial(sweep)  # the alternative: every trial's metrics.csv read again after each result
            old.append(time.perf_counter() - t0)
    for name, times in (("in memory", new), ("re-reading every trial", old)):
        first, last = statistics.median(times[5:15]), statistics.median(times[-10:])
        print(f"{name}: per result at trials 6-15 {1e3 * first:.2f} ms, at the last 10 {1e3 * last:.2f} ms, "
              f"ratio {last / first:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
