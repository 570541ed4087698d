"""The driver's bookkeeping per Tune result as trials pile up: trial 10 against trial 200.

    .venv/bin/python bench/sweep_bookkeeping.py --trials 200

Builds a sweep of N trial run directories (as bench/sweep_page.py does), then feeds the driver's callback
(`steering.SweepCallback`) one result per trial in order, as Tune calls it after every epoch, plus each
trial's end (which prunes last.pt), and times each call. The old way ranked the trials by re-reading every
trial's metrics.csv after each result (`records.best_trial`); its time per call is printed beside for the
same trials. Only the bookkeeping is timed, not Tune's own loop or the training.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_page import SWEEP_ID, make_sweep  # noqa: E402

from brnn_core.sweep.records import Sweep, best_trial, sweeps_dir  # noqa: E402
from brnn_core.sweep.steering import SweepCallback, SweepControl  # noqa: E402


class FakeTrial:
    def __init__(self, trial_id: str):
        self.trial_id = trial_id
        self.error_file = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    args = ap.parse_args(argv)
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
            best_trial(sweep)  # what every result cost before: every trial's metrics.csv read again
            old.append(time.perf_counter() - t0)
    for name, times in (("now (in memory)", new), ("before (re-read every trial)", old)):
        first, last = statistics.median(times[5:15]), statistics.median(times[-10:])
        print(f"{name}: per result at trials 6-15 {1e3 * first:.2f} ms, at the last 10 {1e3 * last:.2f} ms, "
              f"ratio {last / first:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
