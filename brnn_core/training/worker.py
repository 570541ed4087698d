"""Training a run in this process: `python -m brnn_core.training.worker RUN_DIR [--resume]` (the worker the job
registry spawns), `train_in_turn` (the same for the CLI, in the foreground) and `train_run_dir` (a sweep trial,
which its sweep's turn covers).

A run holds its worker lock (runs.worker_lock) from joining the queue to the end of its training, waits there for
a device (runs.job_queue), then its session (training.opening) trains it (training.session); any error ends the
run with a message that says what to fix (training.failures). The worker exits 0 when the run finished or stopped
(or was cancelled while queued), 1 otherwise. The run directory is all it shares with whoever started it; the
data folder comes from $BRNN_DATA_DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import torch

from brnn_core.data.datasets import default_data_dir
from brnn_core.runs import job_queue, worker_lock
from brnn_core.runs.index import update_store
from brnn_core.runs.progress import ProgressPrinter
from brnn_core.runs.protocol import STOP
from brnn_core.runs.rundir import Run
from brnn_core.states import State
from brnn_core.training.control import ControlReader
from brnn_core.training.failures import record_end
from brnn_core.training.opening import StartOptions, open_session
from brnn_core.training.session import Printer, TrainingSession
from brnn_core.training.splits import device_name
from brnn_core.training.threads import release_claim


def stop_sent(control: ControlReader) -> Callable[[], None]:
    """A check for the queue: raises job_queue.Cancelled once a stop was sent to the waiting run. It only looks:
    every command (a stop too) is still handed to the training session, which reads from the same reader."""
    def check() -> None:
        for received in control.peek():
            if received.command is not None and received.command.cmd == STOP:
                raise job_queue.Cancelled("cancelled while queued", received.offset, received.command.id)

    return check


def train_in_turn(run: Run, *, data_dir: Path, resume: bool = False, printer: Printer | None = None,
                  say: Callable[[str], None] = lambda message: None, machine: job_queue.Machine | None = None) -> str:
    """Wait for the run's turn on a device (runs.job_queue), then train it there; its final state, `stopped` when
    it was cancelled while it waited. Raises RunBusy, having written nothing, while another process trains it."""
    with worker_lock.hold(run.path):  # from joining the queue to the end: no second worker of this run
        control = ControlReader(run.control_path, run.read_status().control_offset)
        try:
            with job_queue.wait_turn(run, machine or job_queue.Machine.here(), cancelled=stop_sent(control),
                                     say=say) as turn:
                return train_held(run, data_dir, StartOptions(resume=resume, printer=printer, device=turn.device),
                                  control)
        except job_queue.Cancelled:
            return State.STOPPED


def train_run_dir(run: Run, *, data_dir: Path, resume: bool = False, printer: Printer | None = None,
                  after_epoch: Callable[[int, dict], None] | None = None, resume_from: Path | None = None,
                  before_start: Callable[[TrainingSession], None] | None = None,
                  handoff: tuple[int, float] | None = None, status_fields: dict | None = None,
                  device: str | None = None, lock_wait_s: float = 0.0) -> str:
    """Train the run described by run/config.json in this process, now (no queue: a sweep trial runs in its
    sweep's turn); returns the final state.

    `resume_from` continues from another checkpoint than the run's own last.pt (a PBT trial taking a
    better trial's weights); `before_start(session)` runs once restored, before the first step (where PBT
    applies its new lr: the restored optimizer state brought back the old one); `status_fields` go into
    the first status write (a trial's `ray_node`); `device` takes the place of the config's. Raises RunBusy,
    having written nothing, while another holder keeps the run's worker lock (for up to `lock_wait_s` seconds)."""
    with worker_lock.hold(run.path, wait_s=lock_wait_s):
        me = psutil.Process(os.getpid())
        identity = {"state": State.LOADING, "pid": me.pid, "pid_started": me.create_time(),
                    "host": socket.gethostname(), "heartbeat": time.time(), "ended": None,
                    "started": run.stored_status().get("started") or time.time(), **(status_fields or {})}
        how = StartOptions(resume=resume, printer=printer, after_epoch=after_epoch, resume_from=resume_from,
                           before_start=before_start, handoff=handoff, device=device)
        return train_held(run, data_dir, how, ControlReader(run.control_path, run.read_status().control_offset),
                          identity)


def train_held(run: Run, data_dir: Path, how: StartOptions, control: ControlReader,
               first_status: dict | None = None) -> str:
    """Train `run`, whose worker lock this process holds, to its end (`first_status`: the worker's identity when no
    queue wrote it); any error becomes a run that ended saying what to fix. Returns the final state."""
    threads_before = torch.get_num_threads()  # the run plans its own (threads.py); the caller's are given back
    ends = contextlib.ExitStack()
    try:
        if first_status:  # who trains it, before anything can fail (the queue wrote it for a queued run)
            run.write_status(**first_status, message="starting")
        opened = open_session(run, data_dir, how, control)
        session, splits = opened.session, opened.splits
        ends.callback(session.recorder.close)  # however it ends: TensorBoard's files get the last rows
        session.begin(device_name(splits.train_x.device), f"{len(splits.train_y)} train, {len(splits.val_y)} val "
                      "images", note=opened.note, fresh_last=how.resume_from is not None,
                      before_start=how.before_start)
        return session.run_to_end(splits, mix=opened.mix, config=opened.config, keeper=opened.keeper)
    except (KeyboardInterrupt, Exception) as exc:  # noqa: BLE001 - a worker must always report why it ended
        return record_end(run, exc)
    finally:
        ends.close()
        release_claim()  # this process's share of the CPU (threads.py), if it took one
        torch.set_num_threads(threads_before)


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
    except worker_lock.RunBusy as exc:  # another worker trains it: leave its files alone
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # its lock or its status cannot be written: nothing trained, the message says why
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"\n{run.status().get('message') or state}", flush=True)
    update_store(run.path.parent)  # the dashboard's next start reads none of the runs already in it
    return 0 if state in (State.FINISHED, State.STOPPED) else 1


if __name__ == "__main__":
    sys.exit(main())
