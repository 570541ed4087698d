"""Progress, time left and the lr plan, said the same way by the CLI's progress line (also in a worker's
worker.log) and the Train page."""

from __future__ import annotations

import os
import sys
import time

from brnn_core.runs import queue
from brnn_core.runs.queue import Machine
from brnn_core.runs.rundir import Run
from brnn_core.schedule import planned_lr
from brnn_core.states import ACTIVE_STATES, State


def eta_seconds(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the average rate so far; None before any step has been timed."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    return max(total - done, 0) / rate if rate > 0 else None


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


def progress_text(status: dict, batch_size: int | None = None) -> str:
    """'epoch 2/5 · step 90/225 · 1,234 samples/s · ETA 0:00:41' from a status.json ('' before it knows). A
    paused run says so instead of a time left, and an ended one has none."""
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
    return (text + (f" · {sps:,.0f} samples/s" if sps else "")
            + f" · ETA {format_eta(time_left(status, batch_size))}")


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

    def __call__(self, kind: str, info: dict) -> None:
        if kind == "log":
            now = time.monotonic()
            if not self.tty and now - self.last < 5.0:
                return
            self.last = now
            done, total = info["steps_done"], max(info["total_steps"], 1)
            width = 24
            filled = int(width * min(done / total, 1.0))
            sps = info["samples_per_s"]
            eta = format_eta(eta_seconds(done, total, info["elapsed_s"]))
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
    or holds its device: it starts now. (A device held by a process that is not a run shows only to the worker.)"""
    view = queue.scan(run.path.parent, machine or queue.Machine.here())
    me = next((entry for entry in view.waiting if entry.run_id == run.id), None)
    if me is None:
        return None
    blocked = queue.sweep_running(run.path.parent)
    if blocked or all(slot in view.holders for slot in queue.open_slots(me, view)):
        return queue.place(me, view, blocked)
    return None
