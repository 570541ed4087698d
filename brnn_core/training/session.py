"""One training run in this process, owned by one `TrainingSession` (docs/architecture.md, "One owner per run").

The session owns the run's mutable state: the live settings (`LiveSettings`), the position, the optimizer's
lr (`_apply_lr` is the only code that assigns it: schedule, live change, resume, branch, PBT) and every
status.json write while it trains. Two parts of it live in their own modules: how commands change it
(training.commands) and how a run ends (training.ending). Its helpers return what happened: the `Recorder`
writes rows and checkpoints, the `ControlReader` hands over commands, `warmstart.choose_start` restores a
checkpoint. training.opening builds a session from a run directory; training.worker runs it.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable

import psutil
import torch

from brnn_core.config import TrainConfig
from brnn_core.data.augment import Augmenter
from brnn_core.runs.rundir import Run
from brnn_core.schedule import lr_at
from brnn_core.states import State
from brnn_core.training.commands import Commands, LiveSettings
from brnn_core.training.control import ControlReader
from brnn_core.training.drawing_mix import DrawingMix
from brnn_core.training.ending import Ending
from brnn_core.training.engine import (
    EpochResult,
    EvalResult,
    FitHooks,
    LogPoint,
    eval_batch_size_for,
    fit,
    weights_finite,
)
from brnn_core.training.gradient_flow import gradient_flow_probe
from brnn_core.training.loss_scaling import LossScaler
from brnn_core.training.recorder import Position, Recorder
from brnn_core.training.splits import Splits
from brnn_core.training.threads import ThreadKeeper
from brnn_core.training.warmstart import drop_start_copy

STATUS_EVERY_S = 1.0  # status.json is rewritten at most this often between state changes (the page's heartbeat)
PAUSE_POLL_S = 0.1

Printer = Callable[[str, dict], None]  # (kind: loading | log | epoch | test, info): the CLI's progress line


class TrainingSession(Commands, Ending):
    """One run being trained here: call `before_step` between steps (fit's hooks: `hooks()`).

    `after_epoch(epoch, metrics)` runs once an epoch's files are written (a sweep trial reports to Tune there);
    `handoff` (pid, start time) names the sweep driver that owns the run if Tune ends this thread there."""

    def __init__(self, run: Run, cfg: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 control: ControlReader | None = None, *,
                 classes: list[str], steps_per_epoch: int, start: Position | None = None,
                 live: LiveSettings | None = None, printer: Printer | None = None,
                 after_epoch: Callable[[int, dict], None] | None = None, scaler: LossScaler | None = None,
                 handoff: tuple[int, float] | None = None):
        self.run, self.cfg, self.model, self.optimizer = run, cfg, model, optimizer
        self.classes, self.steps_per_epoch, self.scaler = classes, steps_per_epoch, scaler
        start = start or Position()
        self.position = Position(start.epoch, start.batch, start.step, start.best_val)
        self.step = start.step  # the step commands are applied at (before_step's), for events and status
        self.live = live or LiveSettings.of(cfg)
        self.printer = printer or (lambda kind, info: None)
        self.after_epoch, self.handoff = after_epoch, handoff
        self.recorder = Recorder(run, cfg, model, optimizer, classes=classes, steps_per_epoch=steps_per_epoch,
                                 scaler=scaler)
        status = run.read_status()
        # From after the last command an earlier worker of this run applied (0 for a new run), unless the caller
        # already reads the channel (the queue looked for a stop there): commands sent while the worker waited or
        # loaded data are applied, none twice.
        self.control = control or ControlReader(run.control_path, status.control_offset)
        self.paused = self.stop_requested = False
        self.stop_reason: dict | None = None  # {"source", "reason"} when a scheduler (not a user) asked
        self.t_start = time.perf_counter()
        self.elapsed0 = status.elapsed_s  # time of earlier workers of this run
        self.last_write = -math.inf
        self.last_message: str | None = None
        # Who trains the run and in which state, kept here and put in every write: a status.json that was lost
        # or overwritten meanwhile reads right again at the next heartbeat (the worker lock keeps others out).
        self.identity = {"pid": os.getpid(), "pid_started": psutil.Process(os.getpid()).create_time(),
                         "host": socket.gethostname(), "started": status.get("started") or time.time()}
        self.state = status.state if status.state in (State.LOADING, State.RUNNING) else State.LOADING
        self.progress: dict = {}  # the latest logged loss and speed: every write carries them
        self._apply_lr(self.step)

    # ------------------------------------------------------------ the lr: the only assignment in brnn_core
    def lr_at(self, step: int) -> float:
        """The scheduled lr of `step`: the live peak, the run's schedule, the planned steps (live epochs)."""
        return lr_at(self.cfg.lr_schedule, self.live.lr, step, self.live.epochs * self.steps_per_epoch)

    def _apply_lr(self, step: int) -> float:
        lr = self.lr_at(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    # ------------------------------------------------------------ status.json: every write while it trains
    def status_extra(self) -> dict:
        """Progress fields every status.json write carries (the page's progress bar and ETA)."""
        p = self.position
        return {"epoch": p.epoch, "batch": p.batch, "steps_per_epoch": self.steps_per_epoch,
                "total_steps": self.live.epochs * self.steps_per_epoch,
                "steps_done": p.epoch * self.steps_per_epoch + p.batch, "elapsed_s": self.elapsed_s(),
                "live": self.live.to_dict(),
                **({"skipped_steps": self.scaler.skipped_steps()} if self.scaler is not None else {})}

    def _write(self, **fields) -> None:
        self.last_write = time.monotonic()
        self.last_message = fields.get("message", self.last_message)
        self.state = fields.get("state", self.state)
        self.run.write_status(**{**self.status_extra(), **self.progress, "heartbeat": time.time(),
                                 "control_offset": self.control.offset, **self.identity, "state": self.state,
                                 **({"message": self.last_message} if self.last_message else {}), **fields})

    def heartbeat(self, force: bool = False, **fields) -> None:
        """Progress and a fresh heartbeat, at most once per STATUS_EVERY_S unless forced (a state change)."""
        if force or time.monotonic() - self.last_write >= STATUS_EVERY_S:
            self._write(step=self.step, **fields)

    def elapsed_s(self) -> float:
        return self.elapsed0 + time.perf_counter() - self.t_start

    # ------------------------------------------------------------ commands
    def before_step(self, step: int) -> bool:
        """Apply pending commands, block while paused, set the step's lr. False means: stop now."""
        self.step = step
        self.poll()
        while self.paused and not self.stop_requested:
            self.heartbeat()
            time.sleep(PAUSE_POLL_S)
            self.poll()
        self.heartbeat()
        self._apply_lr(step)
        return not self.stop_requested

    # ------------------------------------------------------------ fit's callbacks
    def hooks(self) -> FitHooks:
        return FitHooks(before_step=self.before_step, on_log=self.on_log, on_epoch_end=self.on_epoch_end,
                        epochs=lambda: self.live.epochs, grad_clip=lambda: self.live.grad_clip,
                        augment=Augmenter(lambda: self.live.augment, dataset=self.cfg.dataset, seed=self.cfg.seed))

    def save_last(self, metrics: dict | None = None) -> None:
        self.recorder.save_last(self.position, self.live.to_dict(), metrics)

    def on_log(self, epoch: int, point: LogPoint) -> None:
        self.position.epoch, self.position.batch, self.position.step = epoch, point.batch, point.step
        self.step = point.step
        self.recorder.train_row(epoch, point, self.elapsed_s())
        self.progress = {"samples_per_s": point.samples_per_s, "loss": point.loss}
        message = f"epoch {epoch + 1}/{self.live.epochs}"
        if message != self.last_message:  # a new epoch (or the first log after a pause): say so at once
            self._write(state=State.RUNNING, message=message, step=point.step)
        else:
            self.heartbeat()
        self.printer("log", {**self.status_extra(), "loss": point.loss, "samples_per_s": point.samples_per_s,
                             "step": point.step})
        # The logged loss predates the last update, so the weights may already be inf: never save those, nor
        # weights whose loss is exploding (a diverged run keeps the last good last.pt).
        if self.recorder.save_due() and not point.exploding and weights_finite(self.model):
            self.save_last()

    def on_epoch_end(self, epoch: int, result: EpochResult, val: EvalResult) -> None:
        self.position.epoch, self.position.batch, self.position.step = epoch, 0, result.step
        self.step = result.step
        metrics = self.recorder.epoch_end(epoch, result, val, self.position, self.live.to_dict(), self.elapsed_s())
        self._write(step=result.step, val_loss=val.loss, val_acc=val.accuracy)
        self.printer("epoch", {"epoch": epoch, "val_loss": val.loss, "val_acc": val.accuracy, "loss": result.loss})
        if self.after_epoch is not None:
            try:
                self.after_epoch(epoch, metrics)
            except SystemExit:  # Tune ended this trial's thread (a PBT pause or exploit): its driver owns it now
                if self.handoff is not None:
                    self.run.log_event("scheduler", "paused by the sweep's scheduler: waits for a free slot to "
                                                    "continue", step=result.step)
                    self._write(state=State.QUEUED, pid=self.handoff[0], pid_started=self.handoff[1],
                                message="waiting for the sweep's scheduler to continue it")
                raise

    # ------------------------------------------------------------ the start and the ends
    def begin(self, where: str, sizes: str, *, note: str | None = None, fresh_last: bool = False,
              before_start: Callable[[TrainingSession], None] | None = None) -> None:
        """Apply commands sent before the worker ran (and `before_start`'s changes), make sure a last.pt exists
        that carries them, and say training started."""
        self.poll()  # commands sent while no worker ran, e.g. `set epochs` before a resume
        if before_start is not None:  # PBT's new lr: before last.pt is saved, so a kill now resumes with it
            before_start(self)
        if fresh_last or not self.run.last_ckpt.is_file():  # fresh_last: restored from elsewhere, last.pt is stale
            self.save_last()  # from now on a killed run always has a last.pt to resume
        drop_start_copy(self.run)  # a branch resumes from its own last.pt from now on
        self._write(state=State.RUNNING, message=f"training on {where}", step=self.step)
        self.run.log_event("start", f"training {self.cfg.dataset} on {where}: {sizes}, {self.steps_per_epoch} "
                                    "steps per epoch" + (f"; {note}" if note else ""), step=self.step)

    def run_to_end(self, splits: Splits, *, mix: DrawingMix | None = None, config: dict | None = None,
                   keeper: ThreadKeeper | None = None) -> str:
        """fit from the position to the live number of epochs, then end the run; returns the final state."""
        hooks = self.hooks()
        hooks.probe = gradient_flow_probe(self.run.gradient_flow_path, self.model, splits.train_x, splits.train_y,
                                          every=self.cfg.gradient_flow_every, batch_size=self.cfg.batch_size,
                                          seed=self.cfg.seed, steps_per_epoch=self.steps_per_epoch)
        if keeper is not None:  # other training processes come and go: re-plan this one's share between steps
            hooks.before_step = keeper.wrap(hooks.before_step)
        cfg, start = self.cfg, self.position
        result = fit(self.model, self.optimizer, splits.train_x, splits.train_y, splits.val_x, splits.val_y,
                     epochs=cfg.epochs, batch_size=cfg.batch_size, seed=cfg.seed, log_interval=cfg.log_interval,
                     eval_batch_size=eval_batch_size_for(splits.train_x.device, cfg.eval_batch_size), amp=cfg.amp,
                     start_epoch=start.epoch, start_batch=start.batch, step=start.step, hooks=hooks,
                     scaler=self.scaler)
        self.step = result.step
        if result.state == State.DIVERGED:
            return self.end_diverged(result)
        if result.state == State.STOPPED:
            return self.end_stopped(result)
        config = config or {}
        return self.end_finished(splits, result, mix=mix, drawings=config.get("my_drawings"),
                                 start_val_acc=config.get("start_val_acc"),
                                 start_per_class=config.get("start_val_per_class"))

