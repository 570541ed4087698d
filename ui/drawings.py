"""The user's saved drawings on the Predict and Runs pages: cached listing and per-checkpoint scores.

A page never evaluates a checkpoint. Scores are read from the small file kept beside each checkpoint
(`inference.scores`), once per server while the checkpoint file stays the same (`score_memo`, kept on disk for
the next server); a missing one is handed to one background thread per server (`Scorer`), which computes and
stores it (reading the drawings once for all checkpoints), and the next rerun shows it. The drawings folder's
fingerprint is taken once per rerun, not once per checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from brnn_core.checkpoint import CheckpointError
from brnn_core.data.drawings import MIN_FOR_ACCURACY, Listing, drawing_count, folder_signature, list_drawings
from brnn_core.inference.scores import (
    MEMO_NAME,
    DrawingScore,
    DrawingTensors,
    ScoreMemo,
    file_version,
    score_and_store,
    stored_accuracy,
)
from ui.background import BackgroundJobs


@st.cache_data(max_entries=8, show_spinner=False)
def _listing(data_dir: str, signature: str) -> Listing:
    return list_drawings(data_dir)


def drawings(data_dir: Path, signature: str | None = None) -> Listing:
    """Every readable drawing (all class sets) and the warnings for files skipped."""
    return _listing(str(data_dir), signature or folder_signature(data_dir))


class Scorer:
    """Scores checkpoints on the drawings on one background thread (ui.background) and stores each score beside
    its checkpoint; the drawings of a folder are read once for all the checkpoints scored on them."""

    def __init__(self):
        self.jobs = BackgroundJobs("drawings-scorer", (CheckpointError, OSError, RuntimeError, ValueError))
        self._read: tuple[tuple[str, str], DrawingTensors] | None = None  # used by the scorer's thread only

    def ask(self, path: Path, data_dir: Path, signature: str) -> None:
        self.jobs.ask((str(path), signature), lambda: self._score(path, data_dir, signature))

    def pending(self) -> int:
        return self.jobs.pending()

    def _score(self, path: Path, data_dir: Path, signature: str) -> None:
        # an unreadable checkpoint raises and gets no score; picking it shows why
        if self._read is None or self._read[0] != (str(data_dir), signature):
            self._read = (str(data_dir), signature), DrawingTensors(data_dir)
        score_and_store(path, data_dir, signature, self._read[1])


@st.cache_resource
def scorer() -> Scorer:
    return Scorer()


def scores(paths: list[Path], data_dir: Path, signature: str | None = None) -> dict[Path, DrawingScore | None]:
    """The DrawingScore per checkpoint as stored, None while unknown (then it is being computed) or below the
    threshold. Never evaluates one: one `stat` per checkpoint for the scores this server knows (`score_memo`,
    kept on disk for the next server), one small file read for the others. `signature`: the drawings folder's
    fingerprint when the page already took it."""
    if drawing_count(data_dir) < MIN_FOR_ACCURACY:  # of any class set: no score is shown, none is read
        return dict.fromkeys(paths)
    signature = signature or folder_signature(data_dir)
    memo = score_memo(str(data_dir))
    out = {}
    for path in paths:
        try:
            version = file_version(path)
        except OSError:
            out[path] = None
            continue
        known, score = memo.get(path, signature, version)
        if not known:
            known, score = stored_accuracy(path, signature)
            if known:
                memo.put(path, signature, version, score)
            else:
                scorer().ask(path, data_dir, signature)
        out[path] = score
    memo.save()
    return out


@st.cache_resource
def score_memo(data_dir: str) -> ScoreMemo:
    """The stored scores this server has read (and the last server, from the data folder's file)."""
    return ScoreMemo(Path(data_dir) / MEMO_NAME)


def score_label(score: DrawingScore | None) -> str:
    """' · my drawings 83% (12)' for a checkpoint picker (' · held-out drawings 100% (2)' for one that trained on
    the others), or ''."""
    if not score:
        return ""
    what = "held-out drawings" if score.held_out_only else "my drawings"
    return f" · {what} {100 * score.accuracy:.0f}% ({score.count})"
