"""Teaching a model the user's handwriting: start from a checkpoint, mix the saved drawings in.

Two `TrainConfig` fields drive it, and the worker calls the pieces here:
- `init_from`: a checkpoint whose weights the run starts from (fine-tuning instead of random weights).
- `my_drawings`: the share of the training images that are the user's drawings (the ones not held
  out, see brnn_core.data.drawings), each repeated enough times to make up that share of an epoch.
The held-out drawings are never trained on; their accuracy with the starting weights ("before",
only when fine-tuning) and with the final best weights ("after") goes into the run's report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from brnn_core.config import TrainConfig
from brnn_core.data.datasets import DatasetError
from brnn_core.data.drawings import as_tensors, drawings_dir, held_out_ordinals, list_drawings
from brnn_core.text import plural
from brnn_core.training.engine import evaluate


@dataclass
class DrawingMix:
    """The user's drawings for one run: the training part (repeated) and the held-out part."""

    train_x: torch.Tensor  # (K, 28, 28) uint8 on the training device
    train_y: torch.Tensor  # (K,)
    held_x: torch.Tensor  # (M, 28, 28) uint8, never trained on
    held_y: torch.Tensor  # (M,)
    repeats: int  # each training drawing appears this many times per epoch
    folder: Path
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def prepare(cls, cfg: TrainConfig, data_dir: Path, classes: list[str], device: torch.device,
                base_size: int) -> DrawingMix | None:
        """The drawings labelled with `classes`, sized to `cfg.my_drawings` of the epoch; None when 0."""
        if cfg.my_drawings <= 0:
            return None
        folder = drawings_dir(data_dir)
        listing = list_drawings(data_dir, classes)
        train_x, train_y = as_tensors(listing, held_out=False)
        held_x, held_y = as_tensors(listing, held_out=True)
        if not len(train_y):
            raise DatasetError(
                f"my_drawings={cfg.my_drawings:g} but {folder} holds no drawings to train on labelled with "
                f"{cfg.dataset}'s classes ({len(held_y)} held out): save some on the Predict page, or set "
                "my_drawings=0")
        share = cfg.my_drawings
        repeats = max(1, round(share * base_size / ((1.0 - share) * len(train_y))))  # K r / (N + K r) = share
        return cls(train_x.to(device), train_y.to(device), held_x.to(device), held_y.to(device), repeats, folder,
                   listing.warnings)

    def mixed(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The base training images with the training drawings appended `repeats` times."""
        return (torch.cat([x, self.train_x.repeat(self.repeats, 1, 1)]),  # (N + K r, 28, 28)
                torch.cat([y, self.train_y.repeat(self.repeats)]))

    def held_out_accuracy(self, model: nn.Module) -> float | None:
        """Accuracy on the held-out drawings (None when there are none)."""
        if not len(self.held_y):
            return None
        return evaluate(model, self.held_x, self.held_y).accuracy

    def record(self, model: nn.Module, cfg: TrainConfig, previous: dict | None) -> dict:
        """What config.json keeps about the mix; "before" is measured once, at the run's first start."""
        measured = self.held_out_accuracy(model) if cfg.init_from and not previous else None
        before = previous.get("before") if previous else measured  # resumed: measured at the first start
        return {"folder": str(self.folder), "train": len(self.train_y), "held_out": len(self.held_y),
                "repeats": self.repeats, "share": cfg.my_drawings, "before": before, "skipped": self.warnings}

    def finish(self, model: nn.Module, recorded: dict) -> tuple[dict, str]:
        """The report entry (before/after on the held-out drawings) and one line for the final message."""
        after = self.held_out_accuracy(model)
        entry = {**recorded, "after": after}
        return entry, summary_line(entry)


def mix_line(entry: dict) -> str:
    """'8 of your drawings mixed into training, each shown 127 times an epoch (20% of its images)': what a run's
    `my_drawings` entry means, for a reader who has not seen `repeats`."""
    share = f" ({100 * entry['share']:g}% of its images)" if entry.get("share") else ""
    return (f"{entry.get('train', 0):,} of your drawings mixed into training, each shown "
            f"{plural(entry.get('repeats', 1), 'time')} an epoch{share}")


def summary_line(entry: dict) -> str:
    """'held-out drawings: 40.0% -> 80.0% (5)' or why there is no number."""
    n = entry.get("held_out", 0)
    if not n:
        return (f"{entry.get('train', 0)} of your drawings mixed in; none held out yet "
                f"(the {held_out_ordinals(1)} drawing of a class is the first held out)")
    before = entry.get("before")
    after = entry.get("after")
    start = f"{100 * before:.1f}% -> " if before is not None else "(trained from scratch) "
    end = f"{100 * after:.1f}%" if after is not None else "?"
    return f"held-out drawings: {start}{end} ({n})"
