"""One training run from start to finish, recorded in its run directory.

This is what both `python -m brnn_core train` and the dashboard's background worker
execute, so a CLI run and a dashboard run are the same code and can be watched the same way.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from .allocator import tune_malloc
from .augment import Augmenter
from .checkpoint import CheckpointError, check_state_matches, load_checkpoint, save_checkpoint
from .config import LIVE_FIELDS, TrainConfig, cpu_threads, resolve_augment, resolve_device
from .data import DatasetError, load_dataset, split_train_val
from .engine import EvalResult, FitHooks, LogPoint, evaluate, fit, make_optimizer, weights_finite
from .fileio import atomic_write, atomic_write_json
from .jobs import Controller
from .model import BiLSTM, ModelConfig
from .reports import write_report
from .runs import Run

CHECKPOINT_EVERY_S = 30.0  # also save last.pt this often mid-epoch, so a kill loses little


def model_config_for(cfg: TrainConfig, num_classes: int) -> ModelConfig:
    return ModelConfig(hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, num_classes=num_classes,
                       dropout=cfg.dropout, head=cfg.head)


def run_training(run: Run, *, data_dir: Path, resume: bool = False,
                 printer: Callable[[str, dict], None] | None = None) -> str:
    """Train the run described by run/config.json; returns the final state."""
    import psutil

    me = psutil.Process(os.getpid())
    run.write_status(state="loading", message="starting", pid=os.getpid(), pid_started=me.create_time(),
                     heartbeat=time.time(), started=run.raw_status().get("started") or time.time(), ended=None)
    try:
        return _train(run, data_dir, resume, printer or (lambda kind, info: None))
    except KeyboardInterrupt:
        run.log_event("stop", "interrupted from the keyboard")
        run.write_status(state="interrupted", message="interrupted from the keyboard", ended=time.time())
        return "interrupted"
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


def run_log_traceback(run: Run) -> None:
    with contextlib.suppress(OSError):
        run.log_event("traceback", traceback.format_exc())


def _fail(run: Run, message: str) -> str:
    with contextlib.suppress(OSError):
        run.log_event("error", message)
    try:
        run.write_status(state="failed", message=message, ended=time.time())
    except OSError:
        # Disk full: an atomic rewrite needs room for a second copy; rewriting in place usually fits.
        with contextlib.suppress(OSError):
            status = {**run.raw_status(), "state": "failed", "message": message, "ended": time.time()}
            run.status_path.write_text(json.dumps(status, default=str))
    return "failed"


def _train(run: Run, data_dir: Path, resume: bool, printer) -> str:
    config = run.config()
    cfg = TrainConfig.from_dict({"augment": "off", **config.get("train", {})})  # runs from before augment: off
    device = resolve_device(cfg.device)
    threads = cpu_threads(cfg.cpu_threads)
    if device.type == "cpu" and threads:
        torch.set_num_threads(threads)  # spinning OpenMP threads on a busy machine cost far more than they give
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    elif device.type == "cpu":
        tune_malloc()  # reuse freed memory instead of page-faulting it back every step (1.19x measured on the worker)

    run.write_status(state="loading", message=f"loading {cfg.dataset}")
    # A worker killed while saving leaves its temp file behind; only this run's worker writes there.
    for stale in run.checkpoint_dir.glob(".*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()
    ds = load_dataset(cfg.dataset, data_dir, progress=lambda msg: run.write_status(message=msg))
    train_idx, val_idx = split_train_val(len(ds.train_y), cfg.val_fraction, cfg.seed)
    # Split on the host and move only the pieces, then drop the full training tensors: every image is
    # held once (in train or in val), on the device and in RAM, for the whole run.
    train_x, train_y, val_x, val_y, test_x, test_y = (t.to(device) for t in (
        ds.train_x[train_idx], ds.train_y[train_idx], ds.train_x[val_idx], ds.train_y[val_idx], ds.test_x, ds.test_y))
    classes, source = ds.classes, ds.source
    del ds

    torch.manual_seed(cfg.seed)
    model = BiLSTM(model_config_for(cfg, len(classes))).to(device)
    optimizer = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.momentum)
    start_epoch = start_batch = step = 0
    best_val = math.inf
    settings = {k: getattr(cfg, k) for k in LIVE_FIELDS}
    if resume and run.last_ckpt.is_file():
        ckpt = load_checkpoint(run.last_ckpt)
        try:  # a last.pt of another architecture: name the layers and shapes, not torch's raw error
            check_state_matches(model.state_dict(), ckpt.model_state)
        except CheckpointError as exc:
            raise CheckpointError(f"{run.last_ckpt} does not belong to this run: {exc}") from None
        model.load_state_dict(ckpt.model_state)
        if ckpt.optimizer_state:
            optimizer.load_state_dict(ckpt.optimizer_state)
        start_epoch, start_batch, step = ckpt.epoch, ckpt.batch_in_epoch, ckpt.step
        settings.update({k: v for k, v in ckpt.train_config.get("live", {}).items() if k in settings})
        for group in optimizer.param_groups:
            group["lr"] = settings["lr"]
        best_val = load_checkpoint(run.best_ckpt).metrics.get("val_loss", math.inf) if run.best_ckpt.is_file() \
            else math.inf
        dropped = drop_metrics_after(run, step)
        run.log_event("resume", f"resumed from last.pt at epoch {start_epoch}, step {step}"
                      + (f" ({dropped} metric rows logged after that checkpoint were dropped)" if dropped else ""),
                      step=step)
    elif resume:
        run.log_event("resume", "no checkpoint was saved yet: starting again from step 0", step=0)
        run.metrics_path.write_text(run.metrics_path.read_text().splitlines(keepends=True)[0])

    steps_per_epoch = math.ceil(len(train_y) / cfg.batch_size)
    config.update(device=str(device), device_name=_device_name(device),
                  sizes={"train": len(train_y), "val": len(val_y), "test": len(test_y)},
                  classes=classes, data_source=source, augment=resolve_augment(cfg.augment, cfg.dataset))
    atomic_write_json(run.config_path, config)
    t_start = time.perf_counter()
    elapsed0 = float(run.raw_status().get("elapsed_s") or 0.0)
    progress = {"epoch": start_epoch, "batch": start_batch}

    def status_extra() -> dict:
        done = progress["epoch"] * steps_per_epoch + progress["batch"]
        return {"epoch": progress["epoch"], "batch": progress["batch"], "steps_per_epoch": steps_per_epoch,
                "total_steps": settings["epochs"] * steps_per_epoch, "steps_done": done,
                "elapsed_s": elapsed0 + time.perf_counter() - t_start, "live": dict(settings)}

    controller = Controller(run, optimizer, settings, status_extra=status_extra)
    last_save = [time.perf_counter()]

    def save_last(epoch: int, batch: int, st: int, metrics: dict | None = None) -> None:
        save_checkpoint(run.last_ckpt, model, classes=classes, epoch=epoch, step=st, batch_in_epoch=batch,
                        train_config={**cfg.to_dict(), "live": dict(settings)}, metrics=metrics,
                        optimizer=optimizer)
        last_save[0] = time.perf_counter()

    def on_log(epoch: int, p: LogPoint) -> None:
        progress.update(epoch=epoch, batch=p.batch)
        run.log_metric(step=p.step, epoch=epoch + p.batch / steps_per_epoch, split="train", loss=p.loss,
                       lr=p.lr, samples_per_s=p.samples_per_s, elapsed_s=status_extra()["elapsed_s"])
        controller.step = p.step
        run.write_status(state="running", message=f"epoch {epoch + 1}/{settings['epochs']}", step=p.step,
                         heartbeat=time.time(), samples_per_s=p.samples_per_s, loss=p.loss, **status_extra())
        printer("log", {**status_extra(), "loss": p.loss, "samples_per_s": p.samples_per_s, "step": p.step})
        # The logged loss predates the last update, so the weights may already be inf: never save those.
        if time.perf_counter() - last_save[0] > CHECKPOINT_EVERY_S and not p.exploding and weights_finite(model):
            save_last(epoch, p.batch, p.step)

    def on_epoch_end(epoch: int, result, val: EvalResult) -> None:
        nonlocal best_val
        progress.update(epoch=epoch, batch=0)
        elapsed = status_extra()["elapsed_s"]
        run.log_metric(step=result.step, epoch=epoch, split="val", loss=val.loss, accuracy=val.accuracy,
                       lr=optimizer.param_groups[0]["lr"], elapsed_s=elapsed)
        metrics = {"val_loss": val.loss, "val_acc": val.accuracy, "train_loss": result.loss}
        save_last(epoch, 0, result.step, metrics)
        if val.loss < best_val:
            best_val = val.loss
            save_checkpoint(run.best_ckpt, model, classes=classes, epoch=epoch, step=result.step,
                            train_config=cfg.to_dict(), metrics=metrics)
        run.log_event("epoch", f"epoch {epoch}: train loss {result.loss:.4f}, val loss {val.loss:.4f}, "
                               f"val acc {100 * val.accuracy:.2f}%", step=result.step)
        run.write_status(step=result.step, val_loss=val.loss, val_acc=val.accuracy, **status_extra())
        printer("epoch", {"epoch": epoch, "val_loss": val.loss, "val_acc": val.accuracy, "loss": result.loss})

    controller.step = step
    controller.poll()  # commands sent while no worker ran, e.g. `set epochs` before a resume
    if not run.last_ckpt.is_file():
        save_last(start_epoch, start_batch, step)  # from now on a killed run always has a last.pt to resume
    run.write_status(state="running", message=f"training on {_device_name(device)}", step=step, **status_extra())
    run.log_event("start", f"training {cfg.dataset} on {_device_name(device)}: {len(train_y)} train, "
                           f"{len(val_y)} val images, {steps_per_epoch} steps per epoch", step=step)
    hooks = FitHooks(before_step=controller, on_log=on_log, on_epoch_end=on_epoch_end,
                     epochs=lambda: settings["epochs"], grad_clip=lambda: settings["grad_clip"],
                     augment=Augmenter(lambda: settings["augment"], dataset=cfg.dataset, seed=cfg.seed))
    result = fit(model, optimizer, train_x, train_y, val_x, val_y, epochs=cfg.epochs, batch_size=cfg.batch_size,
                 seed=cfg.seed, log_interval=cfg.log_interval, eval_batch_size=cfg.eval_batch_size, amp=cfg.amp,
                 start_epoch=start_epoch, start_batch=start_batch, step=step, hooks=hooks)
    controller.step = result.step

    if result.state == "diverged":
        saved = [p.name for p in (run.last_ckpt, run.best_ckpt) if p.is_file()]
        untrained = run.last_ckpt.is_file() and load_checkpoint(run.last_ckpt).step == 0 and len(saved) == 1
        decay = f", weight decay (now {cfg.weight_decay:g})" if cfg.weight_decay > 0 else ""
        message = (f"diverged at step {result.step}: {result.reason or 'the loss became NaN or infinite'}. "
                   f"Lower the learning rate "
                   f"(now {settings['lr']:g}){decay} or turn on gradient clipping; "
                   + ("last.pt holds only the untrained starting weights (it diverged before the first save)."
                      if untrained else
                      f"{' and '.join(saved)} {'hold' if len(saved) > 1 else 'holds'} the last good weights "
                      "saved before it diverged." if saved else "no checkpoint was saved before it diverged."))
        run.log_event("diverged", message, step=result.step)
        run.write_status(state="diverged", message=message, ended=time.time(), step=result.step)
        return "diverged"
    if result.state == "stopped":
        progress.update(epoch=result.epoch, batch=result.batch_in_epoch)
        save_last(result.epoch, result.batch_in_epoch, result.step)
        run.log_event("stopped", f"stopped at step {result.step}; last.pt saved, resume continues from here",
                      step=result.step)
        run.write_status(state="stopped", message=f"stopped at step {result.step}, checkpoint saved",
                         ended=time.time(), step=result.step, **status_extra())
        return "stopped"

    # Final report on the test set, with the best weights (lowest validation loss).
    run.write_status(message="evaluating the best checkpoint on the test set")
    if run.best_ckpt.is_file():
        model.load_state_dict(load_checkpoint(run.best_ckpt).model_state)
    test = evaluate(model, test_x, test_y, batch_size=cfg.eval_batch_size, amp=cfg.amp,
                    num_classes=len(classes))
    run.log_metric(step=result.step, epoch=result.epoch, split="test", loss=test.loss, accuracy=test.accuracy,
                   elapsed_s=status_extra()["elapsed_s"])
    write_report(run, test, test_y.cpu(), classes, cfg.dataset)
    message = f"finished: test accuracy {100 * test.accuracy:.2f}% ({len(test_y)} images)"
    run.log_event("finished", message, step=result.step)
    run.write_status(state="finished", message=message, ended=time.time(), step=result.step,
                     test_acc=test.accuracy, test_loss=test.loss, **status_extra())
    printer("test", {"loss": test.loss, "accuracy": test.accuracy, "per_class": test.per_class})
    return "finished"




def drop_metrics_after(run: Run, step: int) -> int:
    """Remove metrics rows past `step` (logged after the checkpoint a resume starts from), so no step repeats."""
    lines = run.metrics_path.read_text().splitlines(keepends=True)
    keep = [lines[0]] + [line for line in lines[1:] if line.endswith("\n") and _row_step(line) <= step]
    if len(keep) != len(lines):
        atomic_write(run.metrics_path, lambda fh: fh.write("".join(keep).encode()))
    return len(lines) - len(keep)


def _row_step(line: str) -> float:
    try:
        return float(line.split(",", 1)[0])
    except ValueError:
        return math.inf


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)
