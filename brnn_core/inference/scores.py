"""How well a checkpoint reads the user's saved drawings (the Runs and Predict pages' "my drawings" score).

A score is computed once per (checkpoint file, drawings folder) and kept beside the checkpoint, so a page with
a thousand runs reads small files instead of evaluating a thousand models on every rerun.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import torch

from brnn_core.checkpoint import load_checkpoint
from brnn_core.data.drawings import MIN_FOR_ACCURACY, as_tensors, list_drawings
from brnn_core.fileio import atomic_write_json, read_json
from brnn_core.training.engine import evaluate


class DrawingTensors:
    """The saved drawings as tensors, read once per class list: a server scoring a thousand checkpoints on the
    same drawings decodes each image once, not once per checkpoint. Made anew when the folder changes."""

    def __init__(self, data_dir: Path | str):
        self.data_dir = data_dir
        self._by_classes: dict[tuple[str, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, classes: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        key = tuple(str(c) for c in classes)
        if key not in self._by_classes:
            self._by_classes[key] = as_tensors(list_drawings(self.data_dir, list(key)))
        return self._by_classes[key]


def checkpoint_accuracy(checkpoint: Path | str, data_dir: Path | str,
                        tensors: DrawingTensors | None = None) -> tuple[float, int] | None:
    """(accuracy, drawings) of a checkpoint on every drawing labelled with its classes; None under
    MIN_FOR_ACCURACY drawings. A checkpoint trained with my_drawings has seen the non-held-out ones.
    `tensors`: the drawings already read (for many checkpoints in a row)."""
    ckpt = load_checkpoint(checkpoint)
    x, y = (tensors or DrawingTensors(data_dir))(ckpt.classes)
    if len(y) < MIN_FOR_ACCURACY:
        return None
    return evaluate(ckpt.build_model("cpu"), x, y, num_classes=len(ckpt.classes)).accuracy, len(y)


SCORE_SUFFIX = ".drawings.json"  # beside the checkpoint: best.pt.drawings.json


def score_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + SCORE_SUFFIX)


def file_version(checkpoint: Path) -> tuple[int, int]:
    """(mtime_ns, size): what tells one version of a checkpoint file from the next, for the stored scores and
    the ScoreMemo alike. Raises OSError when the file is gone."""
    st = checkpoint.stat()
    return st.st_mtime_ns, st.st_size


def _key(checkpoint: Path, signature: str) -> list:
    return [signature, *file_version(checkpoint)]


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


def score_and_store(checkpoint: Path, data_dir: Path | str, signature: str,
                    tensors: DrawingTensors | None = None) -> tuple[float, int] | None:
    """Compute the score once and keep it beside the checkpoint (a page only ever reads it back)."""
    key = _key(checkpoint, signature)
    score = checkpoint_accuracy(checkpoint, data_dir, tensors)
    atomic_write_json(score_path(checkpoint), {"key": key, "score": list(score) if score else None})
    return score


MEMO_NAME = ".drawing-scores.json"  # in the data folder, beside (not inside) the drawings folder
MEMO_EVERY_S = 10.0


class ScoreMemo:
    """The stored scores a server has read, kept in one file so that a new server does not open a thousand small
    files again: checkpoint path -> (drawings signature, checkpoint mtime_ns and size, score). An entry counts
    only for the same drawings and the same checkpoint file; the files beside the checkpoints stay the truth,
    this is a cache of them (unreadable: ignored). Thread-safe: shared by every browser session."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._lock = threading.Lock()
        saved = read_json(self.path, {})
        scores = saved.get("scores") if isinstance(saved, dict) and saved.get("version") == 1 else None
        self._scores: dict[str, list] = scores if isinstance(scores, dict) else {}
        self._changed = False
        self._saved_at = 0.0

    def get(self, checkpoint: Path, signature: str, version: tuple[int, int]) -> tuple[bool, tuple[float, int] | None]:
        """(known, score) for this checkpoint file version and these drawings."""
        with self._lock:
            hit = self._scores.get(str(checkpoint))
        if not isinstance(hit, list) or len(hit) != 3 or hit[0] != signature or hit[1] != list(version):
            return False, None
        return True, (tuple(hit[2]) if hit[2] else None)

    def put(self, checkpoint: Path, signature: str, version: tuple[int, int], score) -> None:
        with self._lock:
            self._scores[str(checkpoint)] = [signature, list(version), list(score) if score else None]
            self._changed = True

    def save(self) -> None:
        """Write the file if something was learnt, at most every MEMO_EVERY_S."""
        with self._lock:
            if not self._changed or time.monotonic() - self._saved_at < MEMO_EVERY_S:
                return
            data, self._changed, self._saved_at = dict(self._scores), False, time.monotonic()
        with contextlib.suppress(OSError):  # a read-only data folder: the next server reads the files again
            atomic_write_json(self.path, {"version": 1, "scores": data})
