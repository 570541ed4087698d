"""How well a checkpoint reads the user's saved drawings (the Runs and Predict pages' "my drawings" score).

A score is computed once per (checkpoint file, drawings folder) and kept beside the checkpoint, so a page with
a thousand runs reads small files instead of evaluating a thousand models on every rerun.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import NamedTuple

import torch

from brnn_core.checkpoint import load_checkpoint
from brnn_core.data.drawings import MIN_FOR_ACCURACY, as_tensors, list_drawings
from brnn_core.fileio import atomic_write_json, read_json
from brnn_core.training.engine import evaluate


class DrawingScore(NamedTuple):
    accuracy: float
    count: int  # drawings scored
    held_out_only: bool  # the checkpoint trained on the others: only the held-out ones say anything


class DrawingTensors:
    """The saved drawings as tensors, read once per class list: a server scoring a thousand checkpoints on the
    same drawings decodes each image once, not once per checkpoint. Made anew when the folder changes."""

    def __init__(self, data_dir: Path | str):
        self.data_dir = data_dir
        self._by_classes: dict[tuple[str, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def __call__(self, classes: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(images, labels, held-out mask) of the drawings labelled with these classes."""
        key = tuple(str(c) for c in classes)
        if key not in self._by_classes:
            listing = list_drawings(self.data_dir, list(key))
            x, y = as_tensors(listing)
            held = torch.tensor([d.held_out for d in listing.drawings], dtype=torch.bool)
            self._by_classes[key] = x, y, held
        return self._by_classes[key]


LINEAGE_DEPTH = 16  # init_from links followed to find whether a checkpoint's weights saw the drawings


def trained_on_drawings(train_config: dict) -> bool:
    """Whether these weights, or those they started from (`init_from`, followed back), trained on the user's
    drawings. A start checkpoint that cannot be read counts as having seen them: a score must not claim more."""
    config = train_config
    for _ in range(LINEAGE_DEPTH):
        if float(config.get("my_drawings") or 0.0) > 0:
            return True
        start = config.get("init_from")
        if not start:
            return False
        try:
            config = load_checkpoint(start).train_config
        except (OSError, ValueError):
            return True
    return True


def checkpoint_accuracy(checkpoint: Path | str, data_dir: Path | str,
                        tensors: DrawingTensors | None = None) -> DrawingScore | None:
    """The accuracy of a checkpoint on the drawings labelled with its classes: all of them, or only the held-out
    ones when its weights trained on the others (then any number of held-out ones is shown, with its count).
    None under MIN_FOR_ACCURACY drawings, or with no held-out one left to score.
    `tensors`: the drawings already read (for many checkpoints in a row)."""
    ckpt = load_checkpoint(checkpoint)
    x, y, held = (tensors or DrawingTensors(data_dir))(ckpt.classes)
    if len(y) < MIN_FOR_ACCURACY:
        return None
    held_out_only = trained_on_drawings(ckpt.train_config)
    if held_out_only:
        x, y = x[held], y[held]
        if not len(y):
            return None
    result = evaluate(ckpt.build_model("cpu"), x, y, num_classes=len(ckpt.classes))
    return DrawingScore(result.accuracy, len(y), held_out_only)


SCORE_SUFFIX = ".drawings.json"  # beside the checkpoint: best.pt.drawings.json


def score_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.name + SCORE_SUFFIX)


def file_version(checkpoint: Path) -> tuple[int, int]:
    """(mtime_ns, size): what tells one version of a checkpoint file from the next, for the stored scores and
    the ScoreMemo alike. Raises OSError when the file is gone."""
    st = checkpoint.stat()
    return st.st_mtime_ns, st.st_size


SCORE_FORMAT = 2  # [accuracy, count, held_out_only]; a file of another format is computed again


def _key(checkpoint: Path, signature: str) -> list:
    return [SCORE_FORMAT, signature, *file_version(checkpoint)]


def _score(saved) -> DrawingScore | None:
    return DrawingScore(float(saved[0]), int(saved[1]), bool(saved[2])) if saved else None


def stored_accuracy(checkpoint: Path, signature: str) -> tuple[bool, DrawingScore | None]:
    """(found, score) kept beside the checkpoint for this drawings folder (`signature`: drawings.folder_signature)
    and this version of the checkpoint file; found is False when it must be computed (again)."""
    try:
        saved = read_json(score_path(checkpoint))
        key = _key(checkpoint, signature)
    except OSError:
        return False, None
    if not isinstance(saved, dict) or saved.get("key") != key:
        return False, None
    try:
        return True, _score(saved.get("score"))
    except (TypeError, ValueError, IndexError):
        return False, None


def score_and_store(checkpoint: Path, data_dir: Path | str, signature: str,
                    tensors: DrawingTensors | None = None) -> DrawingScore | None:
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
        scores = saved.get("scores") if isinstance(saved, dict) and saved.get("version") == SCORE_FORMAT else None
        self._scores: dict[str, list] = scores if isinstance(scores, dict) else {}
        self._changed = False
        self._saved_at = 0.0

    def get(self, checkpoint: Path, signature: str, version: tuple[int, int]) -> tuple[bool, DrawingScore | None]:
        """(known, score) for this checkpoint file version and these drawings."""
        with self._lock:
            hit = self._scores.get(str(checkpoint))
        if not isinstance(hit, list) or len(hit) != 3 or hit[0] != signature or hit[1] != list(version):
            return False, None
        try:
            return True, _score(hit[2])
        except (TypeError, ValueError, IndexError):
            return False, None

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
            atomic_write_json(self.path, {"version": SCORE_FORMAT, "scores": data})
