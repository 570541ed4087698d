"""Progress, time left and the lr plan, said the same way by the CLI's progress line (also in a worker's
worker.log) and the Train page."""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections import deque

from brnn_core.runs import job_queue
from brnn_core.runs.job_queue import Machine
from brnn_core.runs.rundir import Run
from brnn_core.schedule import planned_lr
from brnn_core.states import ACTIVE_STATES, State

ETA_WINDOW_S = 60.0  # the pace behind an ETA: the logged points of the last minute of training
OUTLIER = 4.0  # an interval slower than this many times the median is a pause or an evaluation, not the pace
MAX_POINTS = 2000  # read from a file's end: more than a minute of points at any logging rate seen here


def eta_seconds(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the average rate so far; None before any step has been timed."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    return max(total - done, 0) / rate if rate > 0 else None


class Pace:
    """A run's recent pace, for its time left: seconds per step over its logged points of the last `window_s`
    seconds of training time, pauses and validation passes left out. A minute of intervals moves little when one
    is slow (a busy machine), where the speed of the latest interval alone made the ETA jump by half.
    The CLI's progress line feeds it each log as it prints; the Train page from metrics.csv (`from_points`), so
    both say the same."""

    def __init__(self, window_s: float = ETA_WINDOW_S):
        self.window_s = window_s
        self.points: deque[tuple[float, float]] = deque()  # (step, elapsed_s)

    @classmethod
    def from_points(cls, steps, elapsed, window_s: float = ETA_WINDOW_S) -> Pace:
        """A pace from logged (step, elapsed_s) pairs in order, e.g. metrics.csv's training rows (the last
        MAX_POINTS: a minute of logging holds far fewer, and a long run's whole file is not walked each time)."""
        pace = cls(window_s)
        for step, seconds in zip(list(steps)[-MAX_POINTS:], list(elapsed)[-MAX_POINTS:], strict=True):
            pace.add(step, seconds)
        return pace

    def add(self, step: float, elapsed_s: float) -> None:
        self.points.append((float(step), float(elapsed_s)))
        while len(self.points) > 2 and self.points[-1][1] - self.points[1][1] >= self.window_s:
            self.points.popleft()

    def seconds_per_step(self) -> float | None:
        """The window's time over its steps, without the intervals that took over OUTLIER times the median
        interval (a pause, a validation pass: time that is not the training's pace); None before two points. A
        resumed run's repeated steps do not count."""
        pairs = itertools.pairwise(self.points)
        intervals = [(t1 - t0, s1 - s0) for (s0, t0), (s1, t1) in pairs if s1 > s0 and t1 >= t0]
        if not intervals:
            return None
        limit = OUTLIER * statistics.median(dt / steps for dt, steps in intervals)
        kept = [(dt, steps) for dt, steps in intervals if dt / steps <= limit]
        return sum(dt for dt, _ in kept) / sum(steps for _, steps in kept)

    def seconds_left(self, done: int, total: int) -> float | None:
        per_step = self.seconds_per_step()
        return None if per_step is None else max(total - done, 0) * per_step


def format_eta(seconds: float | None) -> str:
    """'0:04:07' (h:mm:ss); '…' while unknown."""
    if seconds is None:
        return "…"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def time_left(status: dict, batch_size: int | None = None) -> float | None:
    """Seconds left for a running run: at its latest training speed when the batch size is known (a pause
    or an earlier worker's time does not slow the estimate), else at its average rate so far."""
    done, total = status.get("step") or 0, status.get("total_steps") or 0
    sps = status.get("samples_per_s")
    if batch_size and sps:
        return max(total - done, 0) * batch_size / sps
    return eta_seconds(done, total, status.get("elapsed_s") or 0.0)


def epoch_shown(completed: int, epochs: int | None) -> int:
    """The epoch a run is in, counted as the progress line counts it: from 1, and the last one once all `epochs`
    are done; `completed`: the epochs finished (a checkpoint's and status.json's `epoch`)."""
    return min(completed + 1, epochs) if isinstance(epochs, int) and epochs > 0 else completed + 1


def progress_text(status: dict, batch_size: int | None = None, pace: Pace | None = None) -> str:
    """'epoch 2/5 · step 90/225 · 1,234 samples/s · ETA 0:00:41' from a status.json ('' before it knows), the ETA
    at `pace` (the run's metrics.csv as `Pace.from_points` reads it) once it has one. A paused run says so instead
    of a time left, and an ended one has none."""
    done, total = status.get("step") or 0, status.get("total_steps") or 0
    if not total:
        return ""
    live = status.get("live") or {}
    epochs = live.get("epochs", "?")
    epoch = epoch_shown(status.get("epoch") or 0, epochs) if isinstance(epochs, int) else 1
    sps = status.get("samples_per_s")
    state = status.get("state")
    text = f"epoch {epoch}/{epochs} · step {done}/{total}"
    if state == State.PAUSED:
        return text + " · paused"
    if state is not None and state not in ACTIVE_STATES:
        return text
    left = pace.seconds_left(done, total) if pace is not None else None
    return (text + (f" · {sps:,.0f} samples/s" if sps else "")
            + f" · ETA {format_eta(left if left is not None else time_left(status, batch_size))}")


def lr_plan(config: dict, status: dict, events: list[dict], *, start: int = 0) -> tuple[list[int], list[float]]:
    """A run's lr from `start` to its planned last step (schedule.planned_lr), from its config.json,
    status.json and events.jsonl; empty until the worker has said how many steps an epoch has."""
    train, spe = config.get("train", {}), status.get("steps_per_epoch")
    if not spe or "lr" not in train:
        return [], []
    changes = [(int(e["step"]), e["field"], e["new"]) for e in events
               if e.get("kind") == "set" and e.get("field") in ("lr", "epochs") and e.get("step") is not None]
    return planned_lr(train.get("lr_schedule", "constant"), float(train["lr"]), int(train.get("epochs", 1)),
                      int(spe), changes, start=start)


class ProgressPrinter:
    """A one-line progress bar on a terminal; throttled plain lines when logging to a file."""

    def __init__(self):
        self.tty = sys.stdout.isatty() and os.environ.get("BRNN_PROGRESS") != "plain"
        self.last = 0.0
        self.pace = Pace()

    def __call__(self, kind: str, info: dict) -> None:
        if kind == "log":
            self.pace.add(info["steps_done"], info["elapsed_s"])
            now = time.monotonic()
            if not self.tty and now - self.last < 5.0:
                return
            self.last = now
            done, total = info["steps_done"], max(info["total_steps"], 1)
            width = 24
            filled = int(width * min(done / total, 1.0))
            sps = info["samples_per_s"]
            left = self.pace.seconds_left(done, total)
            eta = format_eta(left if left is not None else eta_seconds(done, total, info["elapsed_s"]))
            line = (f"epoch {info['epoch'] + 1}/{info['live']['epochs']} [{'#' * filled}{'.' * (width - filled)}] "
                    f"{done}/{total} loss {info['loss']:.4f} {sps:,.0f} samples/s ETA {eta}")
            print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", flush=True)
        elif kind == "epoch":
            print(f"{'' if not self.tty else chr(10)}epoch {info['epoch']}: train loss {info['loss']:.4f}  "
                  f"val loss {info['val_loss']:.4f}  val acc {100 * info['val_acc']:.2f}%", flush=True)
        elif kind == "test":
            print(f"test: loss {info['loss']:.4f}  accuracy {100 * info['accuracy']:.2f}%", flush=True)
        elif kind == "loading":  # before the first step: reading, downloading, drawing digits (one line per 5 s)
            now = time.monotonic()
            if now - self.last >= 5.0:
                self.last = now
                print(info["message"], flush=True)


def queue_place(run: Run, machine: Machine | None = None) -> str | None:
    """Where a queued `run` stands, as its worker says it once it is in line ('queued: 1st in line, behind run X
    on cpu'), read from the runs folder (so also before its worker has said it); None when nothing is ahead of it
    or holds its device: it starts now. (A device held by a process that is not a job shows only to the worker.)"""
    view = job_queue.scan(run.path.parent, machine or Machine.here())
    me = next((entry for entry in view.waiting if entry.job_id == run.id), None)
    if me is None:
        return None
    if all(slot in view.holders for slot in job_queue.open_slots(me, view)):
        return job_queue.place(me, view)
    return None
