"""The control channel: how the dashboard (or the CLI) steers a training worker.

A command is one JSON line appended to the run's `control.jsonl` (`{"id", "cmd", "time", ...}`, written by
`runs.rundir.command_line` through `Run.send_command`; what a page makes of the answers: `runs.commands`); the
worker's `Controller` reads new lines between steps, applies them in file order and acknowledges each one
in `events.jsonl` with the command's id, so a page can show "lr 0.01 -> 0.001 at step 812" for exactly the
click that asked for it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from brnn_core.config import LIVE_FIELDS, TrainConfig
from brnn_core.fileio import read_complete_lines
from brnn_core.states import State

if TYPE_CHECKING:
    import torch

HEARTBEAT_S = 1.0
PAUSE_POLL_S = 0.1


class Controller:
    """The worker's end of the control channel; call it between steps (`FitHooks.before_step`)."""

    def __init__(self, run, optimizer: torch.optim.Optimizer, settings: dict, *, status_extra=None,
                 lr_at: Callable[[int], float] | None = None):
        self.run = run
        self.lr_at = lr_at  # the scheduled lr of a step (Recorder.lr_at): the live lr is the schedule's peak
        self.optimizer = optimizer
        self.settings = settings  # live values: LIVE_FIELDS, shared with the recorder and fit's hooks
        self.status_extra = status_extra or (lambda: {})
        # Continue after the last command an earlier worker of this run applied (0 for a new run):
        # commands sent while the worker was still loading data are applied, none twice.
        self.offset = int(run.raw_status().get("control_offset") or 0)
        self.size = -1
        self.paused = False
        self.stop_requested = False
        self.stop_reason: dict | None = None  # {"source", "reason"} when a scheduler (not a user) asked
        self.step = 0
        self.last_beat = 0.0

    def __call__(self, step: int) -> bool:
        """Apply pending commands; block while paused. False means: stop now."""
        self.step = step
        self.poll()
        while self.paused and not self.stop_requested:
            self.heartbeat()
            time.sleep(PAUSE_POLL_S)
            self.poll()
        self.heartbeat()
        return not self.stop_requested

    def poll(self) -> None:
        try:
            size = os.stat(self.run.control_path).st_size
        except FileNotFoundError:
            return
        if size == self.size:  # cheap: one stat per step
            return
        self.size = size
        lines, _ = read_complete_lines(self.run.control_path, self.offset)
        for line in lines:
            # Advance before applying, so the offset saved with a stop does not replay it on resume.
            self.offset += len(line.encode("utf-8", "surrogateescape")) + 1
            try:
                command = json.loads(line)
            except json.JSONDecodeError:
                self.run.log_event("warning", f"ignored a malformed command line: {line[:80]!r}", step=self.step)
                continue
            self.apply(command)

    def apply(self, command: dict) -> None:
        cmd, cid = command.get("cmd"), command.get("id")
        if cmd == "pause":
            if not self.paused:
                self.paused = True
                self._state(State.PAUSED, f"paused at step {self.step}")
            self.run.log_event("pause", f"paused at step {self.step}", step=self.step, command=cid)
        elif cmd == "resume":
            if self.paused:
                self.paused = False
                self._state(State.RUNNING, f"resumed at step {self.step}")
            self.run.log_event("resume", f"resumed at step {self.step}", step=self.step, command=cid)
        elif cmd == "stop":
            self.stop_requested = True
            if command.get("source"):
                self.stop_reason = {"source": command["source"], "reason": command.get("reason")}
            self._state(State.STOPPING, f"stopping at step {self.step}: saving a checkpoint")
            self.run.log_event("stop", f"stop requested at step {self.step}"
                               + (f" by {command['source']}: {command.get('reason')}" if command.get("source") else ""),
                               step=self.step, command=cid)
        elif cmd == "set":
            self.apply_set(command.get("field"), command.get("value"), cid)
        else:
            self.run.log_event("warning", f"unknown command {cmd!r} ignored", step=self.step, command=cid)

    def apply_set(self, name, value, cid, *, source: str = "user", **extra) -> None:
        """Change one live field, validated like the form; the event records old and new values.

        `source` says who asked ("user" for a control command; a scheduler passes its own name and
        whatever else explains the change, e.g. the run it copied weights from)."""
        if name not in LIVE_FIELDS:
            self.run.log_event("warning", f"{name!r} cannot change while training (only {', '.join(LIVE_FIELDS)})",
                               step=self.step, command=cid)
            return
        current = TrainConfig().replace(**{k: self.settings[k] for k in LIVE_FIELDS})
        try:
            checked = TrainConfig.from_dict({**current.to_dict(), name: value}, check_device=False)
        except ValueError as exc:
            self.run.log_event("warning", f"rejected {name}={value!r}: {exc}", step=self.step, command=cid)
            return
        new, old = getattr(checked, name), self.settings[name]
        lr_before = self.optimizer.param_groups[0]["lr"]
        self.settings[name] = new
        lr_now = self.lr_at(self.step) if self.lr_at is not None else self.settings["lr"]
        if name in ("lr", "epochs"):
            for group in self.optimizer.param_groups:
                group["lr"] = lr_now
        note = ""
        if self.lr_at is not None and name == "lr" and not math.isclose(lr_now, new):
            note = f" (the schedule's peak; lr now {lr_now:.3g})"
        elif self.lr_at is not None and name == "epochs" and not math.isclose(lr_now, lr_before):
            note = f" (schedule re-planned; lr {lr_before:.3g} -> {lr_now:.3g})"
        self.run.log_event("set", f"{name} {_show(old)} -> {_show(new)} at step {self.step}{note}", step=self.step,
                           command=cid, field=name, old=old, new=new, source=source, **extra)
        self.run.write_status(**{**self.status_extra(), "live": dict(self.settings)})

    def _state(self, state: str, message: str) -> None:
        self.run.write_status(**{"live": dict(self.settings), **self.status_extra(), "state": state,
                                 "message": message, "step": self.step, "heartbeat": time.time(),
                                 "control_offset": self.offset})

    def heartbeat(self, force: bool = False) -> None:
        now = time.time()
        if force or now - self.last_beat >= HEARTBEAT_S:
            self.last_beat = now
            self.run.write_status(**{**self.status_extra(), "heartbeat": now, "step": self.step,
                                     "control_offset": self.offset})


def _show(value) -> str:
    """A live setting as the event log shows it: numbers compactly (0.001), names as they are (medium)."""
    return value if isinstance(value, str) else f"{value:g}"
