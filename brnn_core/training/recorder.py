"""Recording a run as it trains: the fit hooks that write the run directory.

`Recorder` is what turns `engine.fit`'s callbacks into the run-directory contract: metrics.csv
rows, status.json progress, events.jsonl, and checkpoints/last.pt + best.pt. The worker process
uses it, and so does anything else that trains a run in-process (a sweep trial), so every way of
training leaves the same files and the dashboard shows them all alike.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from brnn_core.checkpoint import save_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.data.augment import Augmenter
from brnn_core.runs.rundir import Run
from brnn_core.schedule import lr_at
from brnn_core.states import State
from brnn_core.training.engine import EpochResult, EvalResult, FitHooks, LogPoint, weights_finite
from brnn_core.training.loss_scaling import LossScaler

CHECKPOINT_EVERY_S = 30.0  # also save last.pt this often mid-epoch, so a kill loses little
SKIP_WARN_FRACTION = 0.5  # fp16: warn when more than this share of a log window's steps were skipped
SKIP_WARN_EVERY = 500  # ... at most once per this many steps

Printer = Callable[[str, dict], None]  # (kind: loading | log | epoch | test, info): the CLI's progress line


@dataclass
class Position:
    """Where training stands (or starts, when resuming): what a checkpoint records."""

    epoch: int = 0  # completed epochs
    batch: int = 0  # batches done in the unfinished epoch
    step: int = 0  # optimizer steps taken
    best_val: float = math.inf  # best.pt's score so far, lower is better (`best_score`: loss, or -accuracy)


def best_score(best_by: str, metrics: dict) -> float:
    """What best.pt is chosen by, as a number where lower is better: the validation loss, or minus the accuracy."""
    if best_by == "val_accuracy":
        return -metrics.get("val_acc", -math.inf)
    return metrics.get("val_loss", math.inf)


class Recorder:
    """Writes one run's progress as `fit` reports it; `hooks()` gives the FitHooks to pass to fit.

    `settings` holds the live values (lr, grad_clip, epochs, ...) and is shared with the Controller,
    which changes it; `after_epoch(epoch, metrics)` is called once an epoch's files are written (a
    sweep trial reports to its scheduler there)."""

    def __init__(self, run: Run, cfg: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                 classes: list[str], settings: dict, start: Position, steps_per_epoch: int,
                 printer: Printer | None = None, after_epoch: Callable[[int, dict], None] | None = None,
                 scaler: LossScaler | None = None):
        self.run, self.cfg, self.model, self.optimizer = run, cfg, model, optimizer
        self.classes, self.settings, self.steps_per_epoch = classes, settings, steps_per_epoch
        self.position = Position(start.epoch, start.batch, start.step, start.best_val)
        self.printer = printer or (lambda kind, info: None)
        self.after_epoch = after_epoch
        self.t_start = time.perf_counter()
        self.elapsed0 = float(run.raw_status().get("elapsed_s") or 0.0)  # time of earlier workers of this run
        self.last_save = time.perf_counter()
        self.scaler = scaler  # fp16 loss scaling: saved in last.pt, its skipped steps reported
        self._skips_seen = (scaler.steps, scaler.skipped_steps()) if scaler is not None else (0, 0)
        self._skip_warned_at = -SKIP_WARN_EVERY

    def lr_at(self, step: int) -> float:
        """The scheduled lr of `step`: the live peak, the run's schedule, the planned steps (live epochs)."""
        return lr_at(self.cfg.lr_schedule, self.settings["lr"], step, self.settings["epochs"] * self.steps_per_epoch)

    def hooks(self, before_step: Callable[[int], bool] | None) -> FitHooks:
        def scheduled(step: int) -> bool:
            go = before_step(step) if before_step is not None else True  # live changes first, then the lr
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr_at(step)
            return go

        return FitHooks(before_step=scheduled, on_log=self.on_log, on_epoch_end=self.on_epoch_end,
                        epochs=lambda: self.settings["epochs"], grad_clip=lambda: self.settings["grad_clip"],
                        augment=Augmenter(lambda: self.settings["augment"], dataset=self.cfg.dataset,
                                          seed=self.cfg.seed))

    def status_extra(self) -> dict:
        """Progress fields every status.json write carries (the page's progress bar and ETA)."""
        p = self.position
        return {"epoch": p.epoch, "batch": p.batch, "steps_per_epoch": self.steps_per_epoch,
                "total_steps": self.settings["epochs"] * self.steps_per_epoch,
                "steps_done": p.epoch * self.steps_per_epoch + p.batch, "elapsed_s": self.elapsed_s(),
                "live": dict(self.settings),
                **({"skipped_steps": self.scaler.skipped_steps()} if self.scaler is not None else {})}

    def elapsed_s(self) -> float:
        return self.elapsed0 + time.perf_counter() - self.t_start

    def save_last(self, metrics: dict | None = None) -> None:
        p = self.position
        save_checkpoint(self.run.last_ckpt, self.model, classes=self.classes, epoch=p.epoch, step=p.step,
                        batch_in_epoch=p.batch, train_config={**self.cfg.to_dict(), "live": dict(self.settings)},
                        metrics=metrics, optimizer=self.optimizer, scaler=self.scaler)
        self.last_save = time.perf_counter()

    def check_skips(self, step: int) -> None:
        """fp16: an event when most steps of the last log window were skipped (their gradients overflowed)."""
        if self.scaler is None:
            return
        steps, skipped = self.scaler.steps, self.scaler.skipped_steps()
        new_steps, new_skipped = steps - self._skips_seen[0], skipped - self._skips_seen[1]
        self._skips_seen = (steps, skipped)
        if new_steps and new_skipped > SKIP_WARN_FRACTION * new_steps and step - self._skip_warned_at >= \
                SKIP_WARN_EVERY:
            self._skip_warned_at = step
            self.run.log_event("warning", f"fp16 loss scaling skipped {new_skipped} of the last {new_steps} steps "
                                          f"(their gradients overflowed; {skipped} skipped in all, loss scale now "
                                          f"{self.scaler.get_scale():g}); if most steps keep overflowing the run "
                                          "ends as diverged", step=step, skipped_steps=skipped)

    def on_log(self, epoch: int, point: LogPoint) -> None:
        self.position.epoch, self.position.batch, self.position.step = epoch, point.batch, point.step
        self.check_skips(point.step)
        self.run.log_metric(step=point.step, epoch=epoch + point.batch / self.steps_per_epoch, split="train",
                            loss=point.loss, lr=point.lr, samples_per_s=point.samples_per_s,
                            elapsed_s=self.elapsed_s())
        extra = self.status_extra()
        self.run.write_status(state=State.RUNNING, message=f"epoch {epoch + 1}/{self.settings['epochs']}",
                              step=point.step, heartbeat=time.time(), samples_per_s=point.samples_per_s,
                              loss=point.loss, **extra)
        self.printer("log", {**extra, "loss": point.loss, "samples_per_s": point.samples_per_s, "step": point.step})
        # The logged loss predates the last update, so the weights may already be inf: never save those, nor
        # weights whose loss is exploding (a diverged run keeps the last good last.pt).
        if time.perf_counter() - self.last_save > CHECKPOINT_EVERY_S and not point.exploding \
                and weights_finite(self.model):
            self.save_last()

    def on_epoch_end(self, epoch: int, result: EpochResult, val: EvalResult) -> None:
        self.position.epoch, self.position.batch, self.position.step = epoch, 0, result.step
        self.run.log_metric(step=result.step, epoch=epoch, split="val", loss=val.loss, accuracy=val.accuracy,
                            lr=self.optimizer.param_groups[0]["lr"], elapsed_s=self.elapsed_s())
        metrics = {"val_loss": val.loss, "val_acc": val.accuracy, "train_loss": result.loss}
        self.save_last(metrics)
        if best_score(self.cfg.best_by, metrics) < self.position.best_val:
            self.position.best_val = best_score(self.cfg.best_by, metrics)
            save_checkpoint(self.run.best_ckpt, self.model, classes=self.classes, epoch=epoch, step=result.step,
                            train_config={**self.cfg.to_dict(), "live": dict(self.settings)}, metrics=metrics)
        self.run.log_event("epoch", f"epoch {epoch}: train loss {result.loss:.4f}, val loss {val.loss:.4f}, "
                                    f"val acc {100 * val.accuracy:.2f}%", step=result.step)
        self.run.write_status(step=result.step, val_loss=val.loss, val_acc=val.accuracy, **self.status_extra())
        self.printer("epoch", {"epoch": epoch, "val_loss": val.loss, "val_acc": val.accuracy, "loss": result.loss})
        if self.after_epoch is not None:
            self.after_epoch(epoch, metrics)
