"""Commands while a run trains: the live settings (`LiveSettings`) and how the training session applies a
pause, resume, stop or `set` from the control channel (runs.protocol), or a scheduler's change (PBT).

`Commands` is a part of `TrainingSession` (training.session), which owns the state it changes: every change is
acknowledged in events.jsonl with the command's id and carried into status.json by the session's next write.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from brnn_core.config import LIVE_AUTO_EPOCHS, LIVE_FIELDS, TrainConfig, asks_auto_epochs
from brnn_core.runs.protocol import ACKS, PAUSE, REFUSED, RESUME, SET, STOP, Command, change_message
from brnn_core.states import State


@dataclass(frozen=True)
class LiveSettings:
    """The values that may change while a run trains (config.LIVE_FIELDS)."""

    lr: float
    grad_clip: float
    epochs: int
    augment: str

    @classmethod
    def of(cls, cfg: TrainConfig) -> LiveSettings:
        return cls(**{k: getattr(cfg, k) for k in LIVE_FIELDS})

    def with_saved(self, saved: dict) -> LiveSettings:
        """These values with those a checkpoint saved (a resume continues with its live changes)."""
        return dataclasses.replace(self, **{k: v for k, v in saved.items() if k in LIVE_FIELDS and v is not None})

    def changed(self, name: str, value) -> LiveSettings:
        """One field changed, checked and typed like the form's value; raises ValueError saying why not."""
        if name not in LIVE_FIELDS:
            raise ValueError(f"{name!r} cannot change while training (only {', '.join(LIVE_FIELDS)})")
        if name == "epochs" and asks_auto_epochs(value):  # auto is the dataset's number for a new run only
            raise ValueError(f"epochs {LIVE_AUTO_EPOCHS}")
        checked = TrainConfig.from_dict({**TrainConfig().to_dict(), **self.to_dict(), name: value},
                                        check_device=False)
        return dataclasses.replace(self, **{name: getattr(checked, name)})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class Commands:
    """The training session's handling of commands (mixed into `TrainingSession`, whose state it changes)."""

    def poll(self) -> None:
        """Apply every command sent since the last look."""
        for received in self.control.read():
            if received.command is None:
                self.run.log_event(REFUSED, received.malformed, step=self.step)
            else:
                self.apply(received.command)

    def apply(self, command: Command) -> None:
        cid, step = command.id, self.step
        if command.cmd == PAUSE:
            if not self.paused:
                self.paused = True
                self._write(state=State.PAUSED, message=f"paused at step {step}", step=step)
            self.run.log_event(ACKS[PAUSE], f"paused at step {step}", step=step, command=cid)
        elif command.cmd == RESUME:
            if self.paused:
                self.paused = False
                self._write(state=State.RUNNING, message=f"resumed at step {step}", step=step)
            self.run.log_event(ACKS[RESUME], f"resumed at step {step}", step=step, command=cid)
        elif command.cmd == STOP:
            self.stop_requested = True
            if command.source:
                self.stop_reason = {"source": command.source, "reason": command.reason}
            self._write(state=State.STOPPING, message=f"stopping at step {step}: saving a checkpoint", step=step)
            self.run.log_event(ACKS[STOP], f"stop requested at step {step}"
                               + (f" by {command.source}: {command.reason}" if command.source else ""),
                               step=step, command=cid)
        elif command.cmd == SET:
            self.change(command.field, command.value, command=cid)
        else:
            self.run.log_event(REFUSED, f"unknown command {command.cmd!r} ignored", step=step, command=cid)

    def change(self, name, value, *, command: str | None = None, source: str = "user", was=None, **extra) -> bool:
        """Change one live field, validated like the form; the `set` event records old and new values.

        `source` says who asked ("user" for a control command; a scheduler passes its own name, `was` the
        value it counts as the old one, and whatever else explains the change, e.g. the run it copied)."""
        try:
            new_live = self.live.changed(name, value)
        except ValueError as exc:
            said = str(exc) if name not in LIVE_FIELDS else f"rejected {name}={value!r}: {exc}"
            self.run.log_event(REFUSED, said, step=self.step, command=command)
            return False
        old = getattr(self.live, name) if was is None else was
        new = getattr(new_live, name)
        lr_before = self.optimizer.param_groups[0]["lr"]
        self.live = new_live
        lr_now = self._apply_lr(self.step)
        note = ""
        if name == "lr" and not math.isclose(lr_now, new):
            note = f" (the schedule's peak; lr now {lr_now:.3g})"
        elif name == "epochs" and not math.isclose(lr_now, lr_before):
            note = f" (schedule re-planned; lr {lr_before:.3g} -> {lr_now:.3g})"
        self.run.log_event(ACKS[SET], change_message(name, old, new, self.step, note), step=self.step,
                           command=command, field=name, old=old, new=new, source=source, **extra)
        self._write()
        return True
