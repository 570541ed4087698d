"""One training run from start to finish, recorded in its run directory.

This is what both `python -m brnn_core train` and the dashboard's background worker
execute, so a CLI run and a dashboard run are the same code and can be watched the same way.
The pieces, in the order a run meets them: `prepare_device`, `load_splits`, `warmstart.begin_from`
(fresh weights, init_from, a branch's parent checkpoint, or a resume from last.pt), a `Recorder`
(training.recorder) and a `Controller` (training.control) as `engine.fit`'s hooks, then one
`end_*` function per way a run ends. `run_training` turns any error into a `failed` run whose
message says what to fix. A sweep trial calls `run_training` in its own process, with
`after_epoch` to report to its scheduler.
"""

from __future__ import annotations

import contextlib
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

from brnn_core.checkpoint import CheckpointError, load_checkpoint
from brnn_core.config import LIVE_FIELDS, TrainConfig, resolve_augment, resolve_drawn_share
from brnn_core.data.as_drawn import drawn_copies
from brnn_core.data.batching import split_train_val
from brnn_core.data.datasets import DatasetError
from brnn_core.data.loading import load_dataset
from brnn_core.devices import resolve_device
from brnn_core.fileio import atomic_write_json
from brnn_core.model import BiLSTM, ModelConfig
from brnn_core.runs.rundir import Run
from brnn_core.states import State
from brnn_core.training.allocator import tune_malloc
from brnn_core.training.control import Controller
from brnn_core.training.drawing_mix import DrawingMix
from brnn_core.training.engine import FitResult, evaluate, fit, grad_scaler, make_optimizer
from brnn_core.training.loss_scaling import LossScaler
from brnn_core.training.recorder import Printer, Recorder
from brnn_core.training.reports import write_report
from brnn_core.training.threads import ThreadKeeper, release_claim
from brnn_core.training.warmstart import begin_from, drop_start_copy

# What a run made before a setting existed trained with (its config.json lacks the key): resumed as it was.
PRE_DEFAULTS = {"augment": "off", "lr_schedule": "constant", "input_scale": "unit", "drawn_share": 0.0}


def model_config_for(cfg: TrainConfig, num_classes: int) -> ModelConfig:
    return ModelConfig(hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, num_classes=num_classes,
                       dropout=cfg.dropout, head=cfg.head, input_scale=cfg.input_scale)


def run_training(run: Run, *, data_dir: Path, resume: bool = False, printer: Printer | None = None,
                 after_epoch: Callable[[int, dict], None] | None = None, resume_from: Path | None = None,
                 before_start: Callable[[Controller], None] | None = None) -> str:
    """Train the run described by run/config.json in this process; returns the final state.

    `resume_from` continues from another checkpoint than the run's own last.pt (a PBT trial taking a
    better trial's weights); `before_start(controller)` runs once restored, before the first step
    (where PBT applies its new lr: the restored optimizer state brought back the old one)."""
    me = psutil.Process(os.getpid())
    threads_before = torch.get_num_threads()  # the run plans its own (threads.py); the caller's are given back
    run.write_status(state=State.LOADING, message="starting", pid=os.getpid(), pid_started=me.create_time(),
                     host=socket.gethostname(), heartbeat=time.time(),
                     started=run.raw_status().get("started") or time.time(), ended=None)
    try:
        return _train(run, data_dir, resume, printer or (lambda kind, info: None), after_epoch,
                      resume_from=resume_from, before_start=before_start)
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
        run_log_traceback(run)
        return _fail(run, f"{type(exc).__name__}: {exc}")
    finally:
        release_claim()  # this process's share of the CPU (threads.py), if it took one
        torch.set_num_threads(threads_before)


def run_log_traceback(run: Run) -> None:
    with contextlib.suppress(OSError):
        run.log_event("traceback", traceback.format_exc())


def _fail(run: Run, message: str) -> str:
    with contextlib.suppress(OSError):
        run.log_event("error", message)
    try:
        run.write_status(state=State.FAILED, message=message, ended=time.time())
    except OSError:
        # Disk full: an atomic rewrite needs room for a second copy; rewriting in place usually fits.
        with contextlib.suppress(OSError):
            status = {**run.raw_status(), "state": State.FAILED, "message": message, "ended": time.time()}
            run.status_path.write_text(json.dumps(status, default=str))
    return State.FAILED


@dataclass
class Splits:
    """A dataset split for one run, on the training device: every image is held once (train or val)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: list[str]
    source: str

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train_y), "val": len(self.val_y), "test": len(self.test_y)}


def prepare_device(cfg: TrainConfig) -> torch.device:
    """The run's device, with this process's allocator set up for it (why: bench/README.md); threads: _train."""
    device = resolve_device(cfg.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    elif device.type == "cpu":
        tune_malloc()  # reuse freed memory instead of page-faulting it back every step
    return device


def load_splits(cfg: TrainConfig, data_dir: Path, device: torch.device, progress: Callable[[str], None]) -> Splits:
    """Load the dataset, hold out the validation split, and move the pieces to the device.

    The training split has `drawn_share` of its digits as the canvas draws them (`as_drawn`); validation
    and test keep the dataset's own images, so their accuracy means what it always meant."""
    ds = load_dataset(cfg.dataset, data_dir, progress=progress)
    train_idx, val_idx = split_train_val(len(ds.train_y), cfg.val_fraction, cfg.seed)
    train_x = ds.train_x
    share = resolve_drawn_share(cfg.drawn_share, cfg.dataset)
    if share > 0:
        drawn_idx, drawn = drawn_copies(ds.train_x, share, data_dir, progress=progress)
        train_x = ds.train_x.clone()
        train_x[drawn_idx] = drawn
    # Split on the host and move only the pieces; the full training tensors are dropped with `ds`.
    tensors = (train_x[train_idx], ds.train_y[train_idx], ds.train_x[val_idx], ds.train_y[val_idx],
               ds.test_x, ds.test_y)
    return Splits(*(t.to(device) for t in tensors), classes=ds.classes, source=ds.source)


def _train(run: Run, data_dir: Path, resume: bool, printer: Printer,
           after_epoch: Callable[[int, dict], None] | None, *, resume_from: Path | None = None,
           before_start: Callable[[Controller], None] | None = None) -> str:
    config = run.config()
    cfg = TrainConfig.from_dict({**PRE_DEFAULTS, **config.get("train", {})})
    device = prepare_device(cfg)
    keeper = ThreadKeeper(cfg.cpu_threads, on_change=lambda step, plan: run.log_event(
        "threads", f"now {plan.threads} CPU thread(s): {plan.why}", step=step)) if device.type == "cpu" else None
    run.write_status(state=State.LOADING, message=f"loading {cfg.dataset}")
    for stale in run.checkpoint_dir.glob(".*.tmp"):  # left by a worker killed while saving; only we write here
        with contextlib.suppress(OSError):
            stale.unlink()
    def loading(message: str) -> None:  # the page shows it from status.json, the CLI prints it
        run.write_status(message=message)
        printer("loading", {"message": message})

    splits = load_splits(cfg, data_dir, device, progress=loading)
    torch.manual_seed(cfg.seed)
    model = BiLSTM(model_config_for(cfg, len(splits.classes))).to(device)
    optimizer = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.momentum)
    settings = {k: getattr(cfg, k) for k in LIVE_FIELDS}
    scaler = grad_scaler(device, cfg.amp)  # fp16 only; lives in last.pt with the optimizer
    start, init_note = begin_from(run, cfg, model, optimizer, settings, splits.classes, resume=resume,
                                  resume_from=resume_from, scaler=scaler)
    mix = DrawingMix.prepare(cfg, data_dir, splits.classes, device, len(splits.train_y))  # None unless asked
    if mix is not None:  # the user's drawings mixed into the training split; held-out accuracy "before"
        splits.train_x, splits.train_y = mix.mixed(splits.train_x, splits.train_y)
        config["my_drawings"] = mix.record(model, cfg, config.get("my_drawings"))
    if cfg.init_from and "start_val_acc" not in config:  # fine-tuning: what it knew before, for before -> after
        config["start_val_acc"] = evaluate(model, splits.val_x, splits.val_y, batch_size=cfg.eval_batch_size).accuracy
    config.update(device=str(device), device_name=device_name(device), sizes=splits.sizes(),
                  threads={"torch": torch.get_num_threads(), "why": keeper.claims.plan.why} if keeper else None,
                  classes=splits.classes, data_source=splits.source, augment=resolve_augment(cfg.augment, cfg.dataset),
                  drawn_share=resolve_drawn_share(cfg.drawn_share, cfg.dataset))
    atomic_write_json(run.config_path, config)
    recorder = Recorder(run, cfg, model, optimizer, classes=splits.classes, settings=settings, start=start,
                        steps_per_epoch=math.ceil(len(splits.train_y) / cfg.batch_size), printer=printer,
                        after_epoch=after_epoch, scaler=scaler)
    controller = Controller(run, optimizer, settings, status_extra=recorder.status_extra, lr_at=recorder.lr_at)
    _begin(run, recorder, controller, device, splits, note=init_note, fresh_last=resume_from is not None,
           before_start=before_start)
    hooks = recorder.hooks(controller)
    if keeper is not None:  # other training processes come and go: re-plan this one's share between steps
        hooks.before_step = keeper.wrap(hooks.before_step)
    result = fit(model, optimizer, splits.train_x, splits.train_y, splits.val_x, splits.val_y, epochs=cfg.epochs,
                 batch_size=cfg.batch_size, seed=cfg.seed, log_interval=cfg.log_interval,
                 eval_batch_size=cfg.eval_batch_size, amp=cfg.amp, start_epoch=start.epoch,
                 start_batch=start.batch, step=start.step, hooks=hooks, scaler=scaler)
    controller.step = result.step
    if result.state == State.DIVERGED:
        return end_diverged(run, cfg, settings, result, scaler)
    if result.state == State.STOPPED:
        return end_stopped(run, recorder, result, controller.stop_reason)
    return end_finished(run, recorder, cfg, splits, result, mix=mix, drawings=config.get("my_drawings"),
                        start_val_acc=config.get("start_val_acc"))


def _begin(run: Run, recorder: Recorder, controller: Controller, device: torch.device, splits: Splits, *,
           note: str | None = None, fresh_last: bool = False,
           before_start: Callable[[Controller], None] | None = None) -> None:
    """Apply commands sent before the worker ran (and `before_start`'s changes), make sure a last.pt exists
    that carries them, and say training started."""
    step = recorder.position.step
    controller.step = step
    controller.poll()  # commands sent while no worker ran, e.g. `set epochs` before a resume
    if before_start is not None:  # PBT's new lr: before last.pt is saved, so a kill now resumes with it
        before_start(controller)
    if fresh_last or not run.last_ckpt.is_file():  # fresh_last: restored from elsewhere, last.pt is now stale
        recorder.save_last()  # from now on a killed run always has a last.pt to resume
    drop_start_copy(run)  # a branch resumes from its own last.pt from now on
    run.write_status(state=State.RUNNING, message=f"training on {device_name(device)}", step=step,
                     **recorder.status_extra())
    run.log_event("start", f"training {recorder.cfg.dataset} on {device_name(device)}: {len(splits.train_y)} "
                           f"train, {len(splits.val_y)} val images, {recorder.steps_per_epoch} steps per epoch"
                           + (f"; {note}" if note else ""), step=step)


# ---------------------------------------------------------------- how a run ends
def end_diverged(run: Run, cfg: TrainConfig, settings: dict, result: FitResult,
                 scaler: LossScaler | None = None) -> str:
    """The loss blew up (NaN, a finite explosion, or fp16 steps skipped): keep the last good checkpoints
    and say what to change."""
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
    stuck = scaler.stuck_message() if isinstance(scaler, LossScaler) else None
    if stuck:
        message = f"diverged at step {result.step}: {stuck}; {kept}"
    else:
        message = (f"diverged at step {result.step}: {result.reason or 'the loss became NaN or infinite'}. Lower "
                   f"the learning rate (now {settings['lr']:g}){decay} or turn on gradient clipping; {kept}")
    run.log_event("diverged", message, step=result.step)
    run.write_status(state=State.DIVERGED, message=message, ended=time.time(), step=result.step,
                     **({"skipped_steps": scaler.skipped_steps()} if isinstance(scaler, LossScaler) else {}))
    return State.DIVERGED


def end_stopped(run: Run, recorder: Recorder, result: FitResult, reason: dict | None = None) -> str:
    """Stopped on request: save where it stands so a resume continues from exactly here.

    `reason` comes with a stop a scheduler sent ({"source": "asha", "reason": "..."}): it is the message."""
    recorder.position.epoch, recorder.position.batch = result.epoch, result.batch_in_epoch
    recorder.position.step = result.step
    recorder.save_last()
    why = f"{reason['reason']}; " if reason and reason.get("reason") else ""
    run.log_event("stopped", f"{why}stopped at step {result.step}; last.pt saved, resume continues from here",
                  step=result.step, **({"source": reason.get("source")} if reason else {}))
    said = f"{reason['reason']} (step {result.step})" if why else f"stopped at step {result.step}, checkpoint saved"
    run.write_status(state=State.STOPPED, message=said,
                     ended=time.time(), step=result.step, stopped_by=(reason or {}).get("source"),
                     **recorder.status_extra())
    return State.STOPPED


def end_finished(run: Run, recorder: Recorder, cfg: TrainConfig, splits: Splits, result: FitResult, *,
                 mix: DrawingMix | None = None, drawings: dict | None = None,
                 start_val_acc: float | None = None) -> str:
    """All epochs done: the final report on the test set, with the best weights (lowest validation loss);
    with drawings mixed in, also their held-out accuracy before and after; when fine-tuned, the validation
    accuracy before and after (a fine-tune must not make the model worse at what it knew)."""
    run.write_status(message="evaluating the best checkpoint on the test set")
    model = recorder.model
    if run.best_ckpt.is_file():
        model.load_state_dict(load_checkpoint(run.best_ckpt).model_state)
    test = evaluate(model, splits.test_x, splits.test_y, batch_size=cfg.eval_batch_size, amp=cfg.amp,
                    num_classes=len(splits.classes))
    run.log_metric(step=result.step, epoch=result.epoch, split="test", loss=test.loss, accuracy=test.accuracy,
                   elapsed_s=recorder.elapsed_s())
    drawn, drawn_line = mix.finish(model, drawings) if mix is not None else (None, "")
    extra = {"my_drawings": drawn} if drawn else {}
    if start_val_acc is not None:
        end_val = evaluate(model, splits.val_x, splits.val_y, batch_size=cfg.eval_batch_size).accuracy
        extra["validation"] = {"before": start_val_acc, "after": end_val}
        drawn_line += ("; " if drawn_line else "") + \
            f"validation accuracy: {100 * start_val_acc:.1f}% -> {100 * end_val:.1f}%"
    write_report(run, test, splits.test_y.cpu(), splits.classes, cfg.dataset, extra=extra or None,
                 images=splits.test_x)
    message = f"finished: test accuracy {100 * test.accuracy:.2f}% ({len(splits.test_y)} images)" \
        + (f"; {drawn_line}" if drawn_line else "")
    run.log_event("finished", message, step=result.step)
    run.write_status(state=State.FINISHED, message=message, ended=time.time(), step=result.step,
                     test_acc=test.accuracy, test_loss=test.loss, **recorder.status_extra())
    recorder.printer("test", {"loss": test.loss, "accuracy": test.accuracy, "per_class": test.per_class})
    return State.FINISHED


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)
