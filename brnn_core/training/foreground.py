"""Runs trained in this process, one after another in their turn, as the CLI's `train` and `compare` do:
each run's place in line and its progress printed, a Ctrl-C while one waits cancelling it and the runs in line
after it. The dashboard starts workers instead (runs.jobs.JobRegistry); both wait in the same queue."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from brnn_core.runs import lifecycle, worker_lock
from brnn_core.runs.progress import ProgressPrinter
from brnn_core.runs.rundir import Run, RunError
from brnn_core.states import State
from brnn_core.training.worker import train_in_turn


def say_waiting(message: str) -> None:
    """A waiting run's place in line, as `train` and `teach` print it."""
    print(f"{message}; waiting (Ctrl-C cancels)", flush=True)


def train_in_line(runs: list[Run], *, data_dir: Path, resume: bool = False) -> list[str]:
    """Put `runs` in line at once, in this order (a run started elsewhere meanwhile waits behind them), then train
    each in its turn; their final states, fewer than `runs` when a Ctrl-C ended the line."""
    if len(runs) > 1:
        for run in runs:
            lifecycle.joined_queue(run, os.getpid())
    states = []
    for k, run in enumerate(runs):
        states.append(train_one_in_turn(run, runs[k + 1:], data_dir=data_dir, resume=resume))
        if states[-1] == State.INTERRUPTED:  # Ctrl-C: the runs still in line left it too
            break
    return states


def train_one_in_turn(run: Run, later: list[Run], *, data_dir: Path, resume: bool) -> str:
    """Wait for `run`'s turn and train it, as the dashboard's worker does, saying where it stands in the queue;
    its final state. Ctrl-C while it waits cancels it and the runs in line after it (`later`)."""
    try:
        state = train_in_turn(run, data_dir=data_dir, resume=resume, printer=ProgressPrinter(), say=say_waiting)
    except KeyboardInterrupt:  # while it waited: the queue marked it cancelled
        state = None
    except worker_lock.RunBusy as exc:  # a worker started between the resume's checks and here
        raise RunError(str(exc)) from None
    if state in (None, State.INTERRUPTED):
        for waiting in later:
            lifecycle.cancelled_while_queued(waiting, "cancelled while queued (Ctrl-C)")
    if state is None:
        print(f"\ncancelled while queued (Ctrl-C): run {run.id} never trained"
              + (f", nor the {len(later)} after it" if later else ""), file=sys.stderr, flush=True)
        return State.INTERRUPTED
    status = run.status()
    if status.get("state") != state:  # the worker could not record how it ended: its files are not writable
        print(f"\nerror: the run ended {state}, but its status could not be saved in {run.path}: make the runs "
              f"folder writable and check that the disk has free space, then resume it: "
              f"python -m brnn_core train --resume {run.id}", file=sys.stderr, flush=True)
        return State.FAILED
    print(f"\n{status.get('message') or state}", flush=True)
    return state
