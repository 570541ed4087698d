"""How well a checkpoint reads the user's saved drawings (the Runs and Predict pages' "my drawings" score).

A score is computed once per (checkpoint file, drawings folder) and kept beside the checkpoint, so a page with
a thousand runs reads small files instead of evaluating a thousand models on every rerun.
"""

from __future__ import annotations

from pathlib import Path

from brnn_core.checkpoint import load_checkpoint
from brnn_core.data.drawings import MIN_FOR_ACCURACY, as_tensors, list_drawings
from brnn_core.fileio import atomic_write_json, read_json
from brnn_core.training.engine import evaluate


def checkpoint_accuracy(checkpoint: Path | str, data_dir: Path | str) -> tuple[float, int] | None:
    """(accuracy, drawings) of a checkpoint on every drawing labelled with its classes; None under
    MIN_FOR_ACCURACY drawings. A checkpoint trained with my_drawings has seen the non-held-out ones."""
    ckpt = load_checkpoint(checkpoint)
    x, y = as_tensors(list_drawings(data_dir, ckpt.classes))
    if len(y) < MIN_FOR_ACCURACY:
        return None
    return evaluate(ckpt.build_model("cpu"), x, y, num_classes=len(ckpt.classes)).accuracy, len(y)


SCORE_SUFFIX = ".drawings.json"  # beside the checkpoint: best.pt.drawings.json


def score_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + SCORE_SUFFIX)


def _key(checkpoint: Path, signature: str) -> list:
    st = checkpoint.stat()
    return [signature, st.st_mtime_ns, st.st_size]


def stored_accuracy(checkpoint: Path, signature: str) -> tuple[bool, tuple[float, int] | None]:
    """(found, score) kept beside the checkpoint for this drawings folder (`signature`: drawings.folder_signature)
    and this version of the checkpoint file; found is False when it must be computed (again)."""
    try:
        saved = read_json(score_path(checkpoint))
        key = _key(checkpoint, signature)
    except OSError:
        return False, None
    if not isinstance(saved, dict) or saved.get("key") != key:
        return False, None
    score = saved.get("score")
    return True, (tuple(score) if score else None)


def score_and_store(checkpoint: Path, data_dir: Path | str, signature: str) -> tuple[float, int] | None:
    """Compute the score once and keep it beside the checkpoint (a page only ever reads it back)."""
    key = _key(checkpoint, signature)
    score = checkpoint_accuracy(checkpoint, data_dir)
    atomic_write_json(score_path(checkpoint), {"key": key, "score": list(score) if score else None})
    return score
