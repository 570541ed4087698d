"""The worker process: `python -m brnn_core.training.worker RUN_DIR [--resume]` trains one prepared run.

The job registry and the sweep launcher start it through `spawn` (runs.jobs); it runs `train_run_dir`
(training.session) on the run directory and exits 0 when the run finished or stopped, 1 otherwise. The
run directory is all it shares with whoever started it; the data folder comes from $BRNN_DATA_DIR.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from brnn_core.config import PRE_DEFAULTS
from brnn_core.data.datasets import default_data_dir
from brnn_core.runs.index import update_store
from brnn_core.runs.progress import ProgressPrinter
from brnn_core.runs.rundir import Run
from brnn_core.runs.worker_lock import RunBusy
from brnn_core.states import State
from brnn_core.training.session import train_run_dir
from brnn_core.training.splits import load_splits

__all__ = ["PRE_DEFAULTS", "load_splits", "main", "train_run_dir"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m brnn_core.training.worker", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a run directory made by create_run (config.json in it)")
    parser.add_argument("--resume", action="store_true", help="continue from its last.pt")
    parser.add_argument("--data-dir", type=Path, default=None, help="datasets folder (default $BRNN_DATA_DIR)")
    args = parser.parse_args(argv)
    run = Run(args.run_dir)
    if not run.exists():
        print(f"error: {args.run_dir} holds no run (config.json is missing)", file=sys.stderr)
        return 2
    print(f"run directory: {run.path}", flush=True)
    try:
        state = train_run_dir(run, data_dir=args.data_dir or default_data_dir(), resume=args.resume,
                             printer=ProgressPrinter())
    except RunBusy as exc:  # another worker trains it: leave its files alone
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"\n{run.status().get('message') or state}", flush=True)
    update_store(run.path.parent)  # the dashboard's next start reads none of the runs already in it
    return 0 if state in (State.FINISHED, State.STOPPED) else 1


if __name__ == "__main__":
    sys.exit(main())
