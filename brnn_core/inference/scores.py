"""How well a checkpoint reads the user's saved drawings (the Runs and Predict pages' "my drawings" score)."""

from __future__ import annotations

from pathlib import Path

from brnn_core.checkpoint import load_checkpoint
from brnn_core.data.drawings import MIN_FOR_ACCURACY, as_tensors, list_drawings
from brnn_core.training.engine import evaluate


def checkpoint_accuracy(checkpoint: Path | str, data_dir: Path | str) -> tuple[float, int] | None:
    """(accuracy, drawings) of a checkpoint on every drawing labelled with its classes; None under
    MIN_FOR_ACCURACY drawings. A checkpoint trained with my_drawings has seen the non-held-out ones."""
    ckpt = load_checkpoint(checkpoint)
    x, y = as_tensors(list_drawings(data_dir, ckpt.classes))
    if len(y) < MIN_FOR_ACCURACY:
        return None
    return evaluate(ckpt.build_model("cpu"), x, y, num_classes=len(ckpt.classes)).accuracy, len(y)
