"""One training run in this process, owned by one `TrainingSession` (docs/architecture.md, "One owner per run").

The session owns the run's mutable state: the live settings (`LiveSettings`), the position, the optimizer's
lr (`_apply_lr` is the only code that assigns it: schedule, live change, resume, branch, PBT) and every
status.json write while it trains. Its parts return what happened: the `Recorder` writes rows and
checkpoints, the `ControlReader` hands over commands, `warmstart.choose_start` restores a checkpoint.
`train_run_dir` builds a session from a run directory (`open_session`), trains it and turns any error into a
`failed` run whose message says what to fix; the worker process and a sweep trial both call it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from brnn_core import environment
from brnn_core.checkpoint import CheckpointError, load_checkpoint
from brnn_core.config import (
    LIVE_FIELDS,
    PRE_DEFAULTS,
    TrainConfig,
    asks_auto_epochs,
    resolve_augment,
    resolve_drawn_share,
)
from brnn_core.data.augment import Augmenter
from brnn_core.data.datasets import DatasetError
from brnn_core.devices import run_amp
from brnn_core.fileio import atomic_write_json
from brnn_core.model import RecurrentClassifier
from brnn_core.runs import worker_lock
from brnn_core.runs.protocol import ACKS, PAUSE, REFUSED, RESUME, SET, STOP, Command, change_message
from brnn_core.runs.rundir import Run
from brnn_core.schedule import lr_at
from brnn_core.states import State
from brnn_core.training.control import ControlReader
from brnn_core.training.drawing_mix import DrawingMix
from brnn_core.training.engine import (
    EpochResult,
    EvalResult,
    FitHooks,
    FitResult,
    LogPoint,
    eval_batch_size_for,
    evaluate,
    fit,
    grad_scaler,
    make_optimizer,
    weights_finite,
)
from brnn_core.training.gradient_flow import gradient_flow_probe
from brnn_core.training.loss_scaling import LossScaler
from brnn_core.training.recorder import Position, Recorder
from brnn_core.training.reports import write_report
from brnn_core.training.splits import Splits, device_name, load_splits, model_config_for, prepare_device
from brnn_core.training.threads import ThreadKeeper, release_claim
from brnn_core.training.warmstart import choose_start, drop_start_copy

HEARTBEAT_S = 1.0  # status.json is rewritten at most this often between state changes (the page's heartbeat)
PAUSE_POLL_S = 0.1

Printer = Callable[[str, dict], None]  # (kind: loading | log | epoch | test, info): the CLI's progress line


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
            raise ValueError("epochs 0 (auto) is for a new run; give the total number of epochs, at least 1")
        checked = TrainConfig.from_dict({**TrainConfig().to_dict(), **self.to_dict(), name: value},
                                        check_device=False)
        return dataclasses.replace(self, **{name: getattr(checked, name)})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class TrainingSession:
    """One run being trained here: call `before_step` between steps (fit's hooks: `hooks()`).

    `after_epoch(epoch, metrics)` runs once an epoch's files are written (a sweep trial reports to Tune there);
    `handoff` (pid, start time) names the sweep driver that owns the run if Tune ends this thread there."""

    def __init__(self, run: Run, cfg: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
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
        # Continue after the last command an earlier worker of this run applied (0 for a new run):
        # commands sent while the worker was still loading data are applied, none twice.
        self.control = ControlReader(run.control_path, status.control_offset)
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
        """Progress and a fresh heartbeat, at most once per HEARTBEAT_S unless forced (a state change)."""
        if force or time.monotonic() - self.last_write >= HEARTBEAT_S:
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

    def poll(self) -> None:
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
                     start_epoch=start.epoch,
                     start_batch=start.batch, step=start.step, hooks=hooks, scaler=self.scaler)
        self.step = result.step
        if result.state == State.DIVERGED:
            return self.end_diverged(result)
        if result.state == State.STOPPED:
            return self.end_stopped(result)
        config = config or {}
        return self.end_finished(splits, result, mix=mix, drawings=config.get("my_drawings"),
                                 start_val_acc=config.get("start_val_acc"),
                                 start_per_class=config.get("start_val_per_class"))

    def end_diverged(self, result: FitResult) -> str:
        """The loss blew up (NaN, a finite explosion, or fp16 steps skipped): keep the last good checkpoints
        and say what to change."""
        run, cfg = self.run, self.cfg
        saved = [p.name for p in (run.last_ckpt, run.best_ckpt) if p.is_file()]
        untrained = run.last_ckpt.is_file() and load_checkpoint(run.last_ckpt).step == 0 and len(saved) == 1
        decay = f", weight decay (now {cfg.weight_decay:g})" if cfg.weight_decay > 0 else ""
        if untrained:
            kept = "last.pt holds only the untrained starting weights (it diverged before the first save)."
        elif saved:
            kept = (f"{' and '.join(saved)} {'hold' if len(saved) > 1 else 'holds'} the last good weights "
                    "saved before it diverged.")
        else:
            kept = "no checkpoint was saved before it diverged."
        stuck = self.scaler.stuck_message() if isinstance(self.scaler, LossScaler) else None
        if stuck:
            message = f"diverged at step {result.step}: {stuck}; {kept}"
        else:
            message = (f"diverged at step {result.step}: {result.reason or 'the loss became NaN or infinite'}. "
                       f"Lower the learning rate (now {self.live.lr:g}){decay} or turn on gradient clipping; {kept}")
        run.log_event("diverged", message, step=result.step)
        self._write(state=State.DIVERGED, message=message, ended=time.time(), step=result.step)
        return State.DIVERGED

    def end_stopped(self, result: FitResult) -> str:
        """Stopped on request: save where it stands so a resume continues from exactly here.

        A stop a scheduler sent ({"source": "asha", "reason": "..."}) gives the message its reason."""
        if not weights_finite(self.model):  # blown up since the last log: keep the last good last.pt instead
            return self.end_diverged(dataclasses.replace(result, reason="the weights became NaN or infinite"))
        reason = self.stop_reason
        self.position.epoch, self.position.batch = result.epoch, result.batch_in_epoch
        self.position.step = result.step
        self.save_last()
        why = f"{reason['reason']}; " if reason and reason.get("reason") else ""
        self.run.log_event("stopped", f"{why}stopped at step {result.step}; last.pt saved, resume continues from "
                                      "here", step=result.step, **({"source": reason.get("source")} if reason else {}))
        said = f"{reason['reason']} (step {result.step})" if why else \
            f"stopped at step {result.step}, checkpoint saved"
        self._write(state=State.STOPPED, message=said, ended=time.time(), step=result.step,
                    stopped_by=(reason or {}).get("source"))
        return State.STOPPED

    def end_finished(self, splits: Splits, result: FitResult, *, mix: DrawingMix | None = None,
                     drawings: dict | None = None, start_val_acc: float | None = None,
                     start_per_class: list[float] | None = None) -> str:
        """All epochs done: the final report on the test set, with the best weights; with drawings mixed in,
        also their held-out accuracy before and after; when fine-tuned, the validation accuracy before and
        after, overall and per class (a fine-tune must not make the model forget a class it knew)."""
        run, cfg, model = self.run, self.cfg, self.model
        self._write(message="evaluating the best checkpoint on the test set", step=result.step)
        if run.best_ckpt.is_file():
            model.load_state_dict(load_checkpoint(run.best_ckpt).model_state)
        eval_batch = eval_batch_size_for(splits.test_x.device, cfg.eval_batch_size)
        test = evaluate(model, splits.test_x, splits.test_y, batch_size=eval_batch, amp=cfg.amp,
                        num_classes=len(splits.classes))
        run.log_test_row(step=result.step, epoch=result.epoch, loss=test.loss, accuracy=test.accuracy,
                         elapsed_s=self.elapsed_s())  # one: a resume after a kill here tests again
        my_scores, summary = mix.finish(model, drawings) if mix is not None else (None, "")
        extra = {"my_drawings": my_scores} if my_scores else {}
        if start_val_acc is not None:
            after = evaluate(model, splits.val_x, splits.val_y, batch_size=eval_batch,
                             num_classes=len(splits.classes))
            end_val = after.accuracy
            extra["validation"] = {"before": start_val_acc, "after": end_val, "per_class_after": after.per_class,
                                   **({"per_class_before": start_per_class} if start_per_class else {})}
            summary += ("; " if summary else "") + \
                f"validation accuracy: {100 * start_val_acc:.1f}% -> {100 * end_val:.1f}%"
        write_report(run, test, splits.test_y.cpu(), splits.classes, cfg.dataset, extra={**extra, "amp": cfg.amp},
                     images=splits.test_x)
        message = f"finished: test accuracy {100 * test.accuracy:.2f}% ({len(splits.test_y)} images)" \
            + (f"; {summary}" if summary else "")
        run.log_event("finished", message, step=result.step)
        self._write(state=State.FINISHED, message=message, ended=time.time(), step=result.step,
                    test_acc=test.accuracy, test_loss=test.loss)
        self.printer("test", {"loss": test.loss, "accuracy": test.accuracy, "per_class": test.per_class})
        return State.FINISHED


# ---------------------------------------------------------------- building a session from a run directory
@dataclass
class Opened:
    """A session ready for its first step and what it trains on."""

    session: TrainingSession
    splits: Splits
    mix: DrawingMix | None
    config: dict
    keeper: ThreadKeeper | None
    note: str | None  # how it began, for the start event (fine-tuning's weights)


def run_config(run: Run) -> TrainConfig:
    """The run's TrainConfig, a key it lacks filled with what it trained with before the setting existed."""
    train = run.config().get("train")
    if train is None:  # unreadable or damaged: never train the defaults in its place
        raise ValueError(f"{run.config_path} holds no training settings (the file is damaged or cannot be read); "
                         "restore it, or start a new run")
    return TrainConfig.from_dict({**PRE_DEFAULTS, **train})


def open_session(run: Run, data_dir: Path, *, resume: bool, printer: Printer,
                 after_epoch: Callable[[int, dict], None] | None = None, resume_from: Path | None = None,
                 handoff: tuple[int, float] | None = None, device: str | None = None) -> Opened:
    """Device, threads, data, model, optimizer, warm start and drawing mix for `run`: its session. `device`
    (the queue's free GPU for `auto`) takes the place of the config's."""
    config = run.config()
    cfg = run_config(run)
    device = prepare_device(dataclasses.replace(cfg, device=device) if device else cfg)
    environment.record(run, device)  # environment.json: the code, packages and machine of this start
    cfg = cfg.replace(amp=run_amp(cfg.amp, config.get("amp"), device))  # auto: as it first resolved
    keeper = ThreadKeeper(cfg.cpu_threads, on_change=lambda step, plan: run.log_event(
        "threads", f"now {plan.threads} CPU thread(s): {plan.why}", step=step)) if device.type == "cpu" else None
    run.write_status(message=f"loading {cfg.dataset}")
    for stale in run.checkpoint_dir.glob(".*.tmp"):  # left by a worker killed while saving; only we write here
        with contextlib.suppress(OSError):
            stale.unlink()

    def loading(message: str) -> None:  # the page shows it from status.json, the CLI prints it
        run.write_status(message=message)
        printer("loading", {"message": message})

    splits = load_splits(cfg, data_dir, device, progress=loading)
    torch.manual_seed(cfg.seed)
    model = RecurrentClassifier(model_config_for(cfg, len(splits.classes))).to(device)
    optimizer = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.momentum)
    scaler = grad_scaler(device, cfg.amp)  # fp16 only; lives in last.pt with the optimizer
    began = choose_start(run, cfg, model, optimizer, splits.classes, resume=resume, resume_from=resume_from,
                       scaler=scaler)
    mix = DrawingMix.prepare(cfg, data_dir, splits.classes, device, len(splits.train_y))  # None unless asked
    if mix is not None:  # the user's drawings mixed into the training split; held-out accuracy "before"
        splits.train_x, splits.train_y = mix.mixed(splits.train_x, splits.train_y)
        config["my_drawings"] = mix.record(model, cfg, config.get("my_drawings"))
    if cfg.init_from and "start_val_acc" not in config:  # fine-tuning: what it knew before, for before -> after
        before = evaluate(model, splits.val_x, splits.val_y, num_classes=len(splits.classes),
                          batch_size=eval_batch_size_for(device, cfg.eval_batch_size))
        config["start_val_acc"], config["start_val_per_class"] = before.accuracy, before.per_class
    config.update(device=str(device), device_name=device_name(device), sizes=splits.sizes(),
                  threads={"torch": torch.get_num_threads(), "why": keeper.claims.plan.why} if keeper else None,
                  classes=splits.classes, data_source=splits.source, augment=resolve_augment(cfg.augment, cfg.dataset),
                  amp=cfg.amp,
                  drawn_share=resolve_drawn_share(cfg.drawn_share, cfg.dataset))
    atomic_write_json(run.config_path, config)
    session = TrainingSession(run, cfg, model, optimizer, classes=splits.classes, start=began.position,
                              steps_per_epoch=math.ceil(len(splits.train_y) / cfg.batch_size),
                              live=LiveSettings.of(cfg).with_saved(began.live), printer=printer,
                              after_epoch=after_epoch, scaler=scaler, handoff=handoff)
    return Opened(session, splits, mix, config, keeper, began.note)


def train_run_dir(run: Run, *, data_dir: Path, resume: bool = False, printer: Printer | None = None,
                 after_epoch: Callable[[int, dict], None] | None = None, resume_from: Path | None = None,
                 before_start: Callable[[TrainingSession], None] | None = None,
                 handoff: tuple[int, float] | None = None, status_fields: dict | None = None,
                 device: str | None = None) -> str:
    """Train the run described by run/config.json in this process; returns the final state.

    `resume_from` continues from another checkpoint than the run's own last.pt (a PBT trial taking a
    better trial's weights); `before_start(session)` runs once restored, before the first step (where PBT
    applies its new lr: the restored optimizer state brought back the old one); `status_fields` go into
    the first status write (a trial's `ray_node`); `device` is the one the queue gave it. Raises RunBusy,
    having written nothing, while another process trains the run (its worker lock)."""
    lock = contextlib.ExitStack()
    lock.enter_context(worker_lock.hold(run.path))
    me = psutil.Process(os.getpid())
    threads_before = torch.get_num_threads()  # the run plans its own (threads.py); the caller's are given back
    run.write_status(state=State.LOADING, message="starting", pid=os.getpid(), pid_started=me.create_time(),
                     host=socket.gethostname(), heartbeat=time.time(),
                     started=run.stored_status().get("started") or time.time(), ended=None, **(status_fields or {}))
    try:
        opened = open_session(run, data_dir, resume=resume, printer=printer or (lambda kind, info: None),
                              after_epoch=after_epoch, resume_from=resume_from, handoff=handoff, device=device)
        session, splits = opened.session, opened.splits
        lock.callback(session.recorder.close)  # however it ends: TensorBoard's files get the last rows
        session.begin(device_name(splits.train_x.device), f"{len(splits.train_y)} train, {len(splits.val_y)} val "
                      "images", note=opened.note, fresh_last=resume_from is not None, before_start=before_start)
        return session.run_to_end(splits, mix=opened.mix, config=opened.config, keeper=opened.keeper)
    except KeyboardInterrupt:
        run.log_event("stop", "interrupted from the keyboard")
        run.write_status(state=State.INTERRUPTED, message="interrupted from the keyboard", ended=time.time())
        return State.INTERRUPTED
    except (DatasetError, CheckpointError, ValueError) as exc:
        return _fail(run, str(exc))
    except OSError as exc:
        where = Path(str(exc.filename or run.path))
        if where.is_absolute() and not where.is_relative_to(run.path.resolve()) and \
                not where.is_relative_to(run.path.absolute()):  # e.g. an unreadable data folder
            return _fail(run, f"{exc.strerror or exc} ({where}): make it readable, then resume this run")
        return _fail(run, f"{exc.strerror or exc} ({where}): free disk space or make the "
                          "runs folder writable, then resume this run")
    except Exception as exc:  # noqa: BLE001 - a worker must always report why it ended
        with contextlib.suppress(OSError):
            run.log_event("traceback", traceback.format_exc())
        return _fail(run, f"{type(exc).__name__}: {exc}")
    finally:
        release_claim()  # this process's share of the CPU (threads.py), if it took one
        lock.close()
        torch.set_num_threads(threads_before)


def _fail(run: Run, message: str) -> str:
    with contextlib.suppress(OSError):
        run.log_event("error", message)
    try:
        run.write_status(state=State.FAILED, message=message, ended=time.time())
    except OSError:
        # Disk full: an atomic rewrite needs room for a second copy; rewriting in place usually fits.
        with contextlib.suppress(OSError):
            status = run.read_status().updated(state=State.FAILED, message=message, ended=time.time())
            run.status_path.write_text(json.dumps(status.to_dict(), default=str))
    return State.FAILED
