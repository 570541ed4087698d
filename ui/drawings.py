"""The user's saved drawings on the Predict and Runs pages: cached listing and per-checkpoint scores.

Both are cached on the drawings folder's fingerprint (and, for a score, the checkpoint file's mtime),
so a canvas stroke, which reruns the page, re-evaluates nothing.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from brnn_core.checkpoint import CheckpointError
from brnn_core.data.drawings import MIN_FOR_ACCURACY, Listing, folder_signature, list_drawings
from brnn_core.inference.scores import checkpoint_accuracy


@st.cache_data(max_entries=8, show_spinner=False)
def _listing(data_dir: str, signature: str) -> Listing:
    return list_drawings(data_dir)


def drawings(data_dir: Path) -> Listing:
    """Every readable drawing (all class sets) and the warnings for files skipped."""
    return _listing(str(data_dir), folder_signature(data_dir))


@st.cache_data(max_entries=512, show_spinner="Scoring checkpoints on your drawings…")
def _accuracy(path: str, mtime: float, data_dir: str, signature: str) -> tuple[float, int] | None:
    try:
        return checkpoint_accuracy(path, data_dir)
    except (CheckpointError, OSError, RuntimeError):
        return None  # an unreadable checkpoint has no score; picking it shows why


def accuracy(path: Path, data_dir: Path) -> tuple[float, int] | None:
    """(accuracy, n) of a checkpoint on the drawings of its classes, or None (too few, or unreadable)."""
    if len(drawings(data_dir).drawings) < MIN_FOR_ACCURACY:  # of any class set: no checkpoint is read
        return None
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    return _accuracy(str(path), mtime, str(data_dir), folder_signature(data_dir))


def accuracy_label(path: Path, data_dir: Path) -> str:
    """' · my drawings 83% (12)' for a checkpoint picker, or '' below the threshold."""
    score = accuracy(path, data_dir)
    return f" · my drawings {100 * score[0]:.0f}% ({score[1]})" if score else ""
