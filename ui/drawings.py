"""The user's saved drawings on the Predict and Runs pages: cached listing and per-checkpoint scores.

A page never evaluates a checkpoint. Scores are read from the small file kept beside each checkpoint
(`inference.scores`); a missing one is handed to one background thread per server (`Scorer`), which
computes and stores it, and the next rerun shows it. The drawings folder's fingerprint is taken once per
rerun, not once per checkpoint.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import streamlit as st

from brnn_core.checkpoint import CheckpointError
from brnn_core.data.drawings import MIN_FOR_ACCURACY, Listing, folder_signature, list_drawings
from brnn_core.inference.scores import score_and_store, stored_accuracy


@st.cache_data(max_entries=8, show_spinner=False)
def _listing(data_dir: str, signature: str) -> Listing:
    return list_drawings(data_dir)


def drawings(data_dir: Path, signature: str | None = None) -> Listing:
    """Every readable drawing (all class sets) and the warnings for files skipped."""
    return _listing(str(data_dir), signature or folder_signature(data_dir))


class Scorer:
    """One thread that scores checkpoints on the drawings and stores each score beside its checkpoint."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._pending: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._work, name="drawings-scorer", daemon=True).start()

    def ask(self, path: Path, data_dir: Path, signature: str) -> None:
        key = (str(path), signature)
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)
        self._queue.put((path, data_dir, signature))

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _work(self) -> None:
        while True:
            path, data_dir, signature = self._queue.get()
            try:
                score_and_store(path, data_dir, signature)
            except (CheckpointError, OSError, RuntimeError, ValueError):
                pass  # an unreadable checkpoint has no score; picking it shows why
            finally:
                with self._lock:
                    self._pending.discard((str(path), signature))


@st.cache_resource
def scorer() -> Scorer:
    return Scorer()


def scores(paths: list[Path], data_dir: Path, signature: str | None = None) -> dict[Path, tuple[float, int] | None]:
    """(accuracy, n) per checkpoint as stored, None while unknown (then it is being computed) or below the
    threshold. Reads one small file per checkpoint; never evaluates one. `signature`: the drawings folder's
    fingerprint when the page already took it."""
    signature = signature or folder_signature(data_dir)
    if len(drawings(data_dir, signature).drawings) < MIN_FOR_ACCURACY:  # of any class set: no file is read
        return dict.fromkeys(paths)
    out = {}
    for path in paths:
        found, score = stored_accuracy(path, signature) if path.is_file() else (True, None)
        if not found:
            scorer().ask(path, data_dir, signature)
        out[path] = score
    return out


def score_label(score: tuple[float, int] | None) -> str:
    """' · my drawings 83% (12)' for a checkpoint picker, or ''."""
    return f" · my drawings {100 * score[0]:.0f}% ({score[1]})" if score else ""
