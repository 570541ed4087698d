"""What a run trains on and where: the device (with this process's allocator) and the dataset's splits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from brnn_core.config import TrainConfig, resolve_drawn_share, resolve_head
from brnn_core.data.as_drawn import drawn_copies
from brnn_core.data.batching import split_train_val
from brnn_core.data.loading import load_dataset
from brnn_core.devices import resolve_device
from brnn_core.model import ModelConfig
from brnn_core.training.allocator import tune_malloc


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


def model_config_for(cfg: TrainConfig, num_classes: int, hidden_size: int | None = None) -> ModelConfig:
    """The network `cfg` trains (`hidden_size`: another width, for a benchmark); head auto resolved."""
    return ModelConfig(hidden_size=hidden_size or cfg.hidden_size, num_layers=cfg.num_layers, num_classes=num_classes,
                       dropout=cfg.dropout, head=resolve_head(cfg.head, cfg.bidirectional),
                       input_scale=cfg.input_scale, cell=cfg.cell, bidirectional=cfg.bidirectional)


def prepare_device(cfg: TrainConfig) -> torch.device:
    """The run's device, with this process's allocator set up for it; threads: training.threads."""
    device = resolve_device(cfg.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    elif device.type == "cpu":
        tune_malloc()  # reuse freed memory instead of page-faulting it back every step
    return device


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def load_splits(cfg: TrainConfig, data_dir: Path, device: torch.device, progress: Callable[[str], None]) -> Splits:
    """Load the dataset, hold out the validation split, and move the pieces to the device.

    The training split has `drawn_share` of its digits as pen-stroke copies (`as_drawn`); validation
    and test keep the dataset's own images, so their accuracy means what it always meant."""
    ds = load_dataset(cfg.dataset, data_dir, progress=progress)
    train_idx, val_idx = split_train_val(len(ds.train_y), cfg.val_fraction, cfg.seed)
    train_x = ds.train_x
    share = resolve_drawn_share(cfg.drawn_share, cfg.dataset)
    if share > 0:
        stroke_idx, stroke_copies = drawn_copies(ds.train_x, share, data_dir, progress=progress)
        train_x = ds.train_x.clone()
        train_x[stroke_idx] = stroke_copies
    # Split on the host and move only the pieces; the full training tensors are dropped with `ds`.
    tensors = (train_x[train_idx], ds.train_y[train_idx], ds.train_x[val_idx], ds.train_y[val_idx],
               ds.test_x, ds.test_y)
    return Splits(*(t.to(device) for t in tensors), classes=ds.classes, source=ds.source)
