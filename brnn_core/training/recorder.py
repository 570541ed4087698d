"""Recording a run as it trains: metrics.csv rows, events, checkpoints/last.pt and best.pt, and the TensorBoard
event files that mirror them.

`Recorder` is the training session's part that writes these files; it never writes status.json or the
optimizer's lr (the session does both). Every way of training (the worker, a sweep trial) records through
it, so every run leaves the same files and the dashboard shows them all alike.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

import torch

from brnn_core.checkpoint import save_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.runs import tensorboard_log
from brnn_core.runs.rundir import Run
from brnn_core.training.engine import EpochResult, EvalResult, LogPoint
from brnn_core.training.loss_scaling import LossScaler

CHECKPOINT_EVERY_S = 30.0  # also save last.pt this often mid-epoch, so a kill loses little
SKIP_WARN_FRACTION = 0.5  # fp16: warn when more than this share of a log window's steps were skipped
SKIP_WARN_EVERY = 500  # ... at most once per this many steps


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
    """Writes one run's rows, events and checkpoints; the session says when and with which live values."""

    def __init__(self, run: Run, cfg: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                 classes: list[str], steps_per_epoch: int, scaler: LossScaler | None = None):
        self.run, self.cfg, self.model, self.optimizer = run, cfg, model, optimizer
        self.classes, self.steps_per_epoch = classes, steps_per_epoch
        self.last_save = time.perf_counter()
        self.scaler = scaler  # fp16 loss scaling: saved in last.pt, its skipped steps reported
        self._skips_seen = (scaler.steps, scaler.skipped_steps()) if scaler is not None else (0, 0)
        self._skip_warned_at = -SKIP_WARN_EVERY
        self.tensorboard = tensorboard_log.live(run, cfg)  # None: turned off, or the package is missing

    def save_last(self, position: Position, live: dict, metrics: dict | None = None) -> None:
        save_checkpoint(self.run.last_ckpt, self.model, classes=self.classes, epoch=position.epoch,
                        step=position.step, batch_in_epoch=position.batch,
                        train_config={**self.cfg.to_dict(), "live": live}, metrics=metrics,
                        optimizer=self.optimizer, scaler=self.scaler)
        self.last_save = time.perf_counter()

    def save_due(self) -> bool:
        """True when last.pt is older than the mid-epoch interval."""
        return time.perf_counter() - self.last_save > CHECKPOINT_EVERY_S

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

    def train_row(self, epoch: int, point: LogPoint, elapsed_s: float) -> None:
        self.check_skips(point.step)
        self.run.log_metric(step=point.step, epoch=epoch + point.batch / self.steps_per_epoch, split="train",
                            loss=point.loss, lr=point.lr, samples_per_s=point.samples_per_s, elapsed_s=elapsed_s)
        self.mirror()

    def epoch_end(self, epoch: int, result: EpochResult, val: EvalResult, position: Position, live: dict,
                  elapsed_s: float) -> dict:
        """Validation row, last.pt, best.pt when better (position.best_val updated), the epoch event; the metrics."""
        self.run.log_metric(step=result.step, epoch=epoch, split="val", loss=val.loss, accuracy=val.accuracy,
                            lr=self.optimizer.param_groups[0]["lr"], elapsed_s=elapsed_s)
        metrics = {"val_loss": val.loss, "val_acc": val.accuracy, "train_loss": result.loss}
        self.save_last(position, live, metrics)
        if best_score(self.cfg.best_by, metrics) < position.best_val:
            position.best_val = best_score(self.cfg.best_by, metrics)
            save_checkpoint(self.run.best_ckpt, self.model, classes=self.classes, epoch=epoch, step=result.step,
                            train_config={**self.cfg.to_dict(), "live": live}, metrics=metrics)
        self.run.log_event("epoch", f"epoch {epoch}: train loss {result.loss:.4f}, val loss {val.loss:.4f}, "
                                    f"val acc {100 * val.accuracy:.2f}%", step=result.step)
        self.mirror()
        return metrics

    def mirror(self) -> None:
        """The TensorBoard files catch up with the rows and events written since the last call."""
        self._tensorboard("follow")

    def close(self) -> None:
        """The run's worker is done with it (it ended, failed, or a sweep's scheduler took it): the TensorBoard
        files get the last rows and events (the test row, the final event) and are closed."""
        self._tensorboard("close")
        self.tensorboard = None

    def _tensorboard(self, action: str) -> None:
        if self.tensorboard is None:
            return
        try:
            getattr(self.tensorboard, action)()
        except Exception as exc:  # noqa: BLE001 - optional files: a failure to write them never ends a run
            step, self.tensorboard = self.tensorboard.step, None
            # A folder that refuses the event file (read-only, full) often refuses events.jsonl too. Then the run's
            # own next write ends it and says why; this warning must not raise in its place: close() runs in the
            # worker's clean-up, after the run's end was recorded, and an error there would hide that end.
            with contextlib.suppress(OSError):
                self.run.log_event("warning", f"TensorBoard files stop here ({type(exc).__name__}: {exc}); the "
                                              "run's own files go on", step=step)
