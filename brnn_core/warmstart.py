"""Start training from a checkpoint: its weights, optimizer state and step, with today's settings.

One piece shared by every way of continuing from a saved file: resuming a run from its own
last.pt (worker.restore), a branch starting from its parent's checkpoint (branch.py), and a
scheduler that copies another trial's checkpoint (PBT). The trap it exists for: loading an
optimizer state brings back the hyperparameters saved with it (lr, weight decay, momentum), so
the values the caller wants are put back into the optimizer *after* the state is loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checkpoint import Checkpoint, CheckpointError, check_state_matches, load_checkpoint
from .recorder import Position


@dataclass
class WarmStart:
    """What `start_from_checkpoint` did: where training stands now and how the optimizer starts."""

    position: Position  # the checkpoint's epoch, batch and step (best_val unknown: inf)
    optimizer_restored: bool  # False: a fresh optimizer state (see `fresh_reason`)
    fresh_reason: str = ""  # why the optimizer state was not restored, for the run's event log
    checkpoint: Checkpoint | None = field(default=None, repr=False)


def optimizer_name(optimizer: torch.optim.Optimizer) -> str:
    """The config name of an optimizer built by engine.make_optimizer (Adam -> adam, SGD -> sgd)."""
    return type(optimizer).__name__.lower()


def start_from_checkpoint(source: Path | Checkpoint, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                          settings: dict, overrides: dict | None = None) -> WarmStart:
    """Load `source`'s weights into `model` and, when it fits, its optimizer state into `optimizer`.

    `optimizer` must be built with the hyperparameters wanted from now on (make_optimizer with the
    new config): after the saved state is loaded, those are written back over the saved ones.
    `settings` (the live values, LIVE_FIELDS) is updated with `overrides` (only keys it has), and
    its lr is what the optimizer ends with. The optimizer starts fresh when the checkpoint has no
    optimizer state (best.pt keeps weights only) or was trained with another optimizer type.
    Raises CheckpointError when the weights do not fit the model, naming the layers.
    """
    ckpt = source if isinstance(source, Checkpoint) else load_checkpoint(source)
    check_state_matches(model.state_dict(), ckpt.model_state)
    model.load_state_dict(ckpt.model_state)
    restored, reason = _load_optimizer(ckpt, optimizer)
    settings.update({k: v for k, v in (overrides or {}).items() if k in settings})
    if "lr" in settings:
        for group in optimizer.param_groups:
            group["lr"] = settings["lr"]
    position = Position(ckpt.epoch, ckpt.batch_in_epoch, ckpt.step, math.inf)
    return WarmStart(position, restored, reason, ckpt)


def _load_optimizer(ckpt: Checkpoint, optimizer: torch.optim.Optimizer) -> tuple[bool, str]:
    """Load the saved optimizer state, keeping the hyperparameters `optimizer` was built with."""
    if not ckpt.optimizer_state:
        return False, "the checkpoint carries no optimizer state (best.pt keeps only the weights)"
    saved = str(ckpt.train_config.get("optimizer") or "")
    wanted = optimizer_name(optimizer)
    if saved and saved != wanted:
        return False, f"the optimizer changed ({saved} -> {wanted}): its saved state does not apply"
    built = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    try:
        optimizer.load_state_dict(ckpt.optimizer_state)
    except (ValueError, KeyError) as exc:  # another parameter layout: refuse, do not half-load
        raise CheckpointError(f"the checkpoint's optimizer state does not fit this model ({exc})") from None
    for group, values in zip(optimizer.param_groups, built, strict=True):
        group.update(values)  # the saved lr, weight decay, momentum... give way to the new ones
    return True, ""
