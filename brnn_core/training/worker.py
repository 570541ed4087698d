"""The worker process: `python -m brnn_core.training.worker RUN_DIR [--resume]` trains one prepared run.

The job registry starts it through `spawn` (runs.jobs); it waits its turn on a device (runs.queue), runs
`train_run_dir` (training.session) there and exits 0 when the run finished or stopped (or was cancelled while
queued), 1 otherwise. `train_in_turn` is the same wait-then-train for the CLI's `train`. The run directory is
all it shares with whoever started it; the data folder comes from $BRNN_DATA_DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

from brnn_core.config import PRE_DEFAULTS
from brnn_core.data.datasets import default_data_dir
from brnn_core.runs import queue, worker_lock
from brnn_core.runs.index import update_store
from brnn_core.runs.progress import ProgressPrinter
from brnn_core.runs.protocol import STOP
from brnn_core.runs.rundir import Run
from brnn_core.runs.worker_lock import RunBusy
from brnn_core.states import State
from brnn_core.training.control import ControlReader
from brnn_core.training.session import Printer, train_run_dir
from brnn_core.training.splits import load_splits

__all__ = ["PRE_DEFAULTS", "load_splits", "main", "train_in_turn", "train_run_dir"]


def stop_sent(run: Run) -> Callable[[], None]:
    """A check for the queue: raises queue.Cancelled once a stop was sent to the waiting run. Other commands
    (pause, a live change) are left for the training session, which reads them from the same offset."""
    reader = ControlReader(run.control_path, run.read_status().control_offset)

    def check() -> None:
        for received in reader.read():
            if received.command is not None and received.command.cmd == STOP:
                raise queue.Cancelled("cancelled while queued", received.offset, received.command.id)

    return check


def train_in_turn(run: Run, *, data_dir: Path, resume: bool = False, printer: Printer | None = None,
                  say: Callable[[str], None] = lambda message: None, machine: queue.Machine | None = None) -> str:
    """Wait for the run's turn on a device (runs.queue), then train it there; its final state, `stopped` when
    it was cancelled while it waited. Raises RunBusy, having written nothing, while another process trains it."""
    with contextlib.ExitStack() as turn:
        with worker_lock.hold(run.path):  # no second worker of this run joins the queue (released to train)
            try:
                device = turn.enter_context(queue.wait_turn(run, machine or queue.Machine.here(),
                                                            cancelled=stop_sent(run), say=say))
            except queue.Cancelled:
                return State.STOPPED
        return train_run_dir(run, data_dir=data_dir, resume=resume, printer=printer, device=device)


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
        state = train_in_turn(run, data_dir=args.data_dir or default_data_dir(), resume=args.resume,
                              printer=ProgressPrinter(), say=lambda message: print(message, flush=True))
    except RunBusy as exc:  # another worker trains it: leave its files alone
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"\n{run.status().get('message') or state}", flush=True)
    update_store(run.path.parent)  # the dashboard's next start reads none of the runs already in it
    return 0 if state in (State.FINISHED, State.STOPPED) else 1


if __name__ == "__main__":
    sys.exit(main())
