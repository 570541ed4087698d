"""Batching by indexing: the train/validation split, each epoch's shuffled order, batches of indices.

Pure functions of (size, seed, epoch), so a resumed run replays exactly the batches it would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


def split_train_val(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the training and validation parts of a training set (fixed by seed)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = max(1, int(round(n * val_fraction)))
    return order[n_val:], order[:n_val]


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of epoch `epoch`: a pure function, so a resumed run replays it."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def batches(order: torch.Tensor, batch_size: int, start: int = 0) -> Iterator[torch.Tensor]:
    """Slices of `order`, beginning at batch number `start` (for mid-epoch resume)."""
    for i in range(start * batch_size, len(order), batch_size):
        yield order[i:i + batch_size]


def to_input(x: torch.Tensor) -> torch.Tensor:
    """uint8 images (B, 28, 28) -> float model input in [0, 1] (what ToTensor gives)."""
    return x.float().div_(255.0)
