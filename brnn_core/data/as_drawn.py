"""Pen-stroke copies: a fixed share of a digit dataset's training images redrawn with a round brush
(`strokes.render`) and put through the canvas path (`canvas.preprocess`), so the model also learns digits as
the canvas gives them (docs/decisions/011-drawn-share.md). Digits only.

The copies depend only on the dataset's images and the share: made once, kept in a cache file that every
later run, sweep trial and Teach it reads (one process draws, the others wait for its file). Validation uses
the original of any copied digit. Details: docs/datasets.md, "Pen-stroke copies of the training digits".
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from brnn_core.data import canvas, strokes
from brnn_core.fileio import atomic_write
from brnn_core.locks import try_lock, wait_lock

VERSION = 2  # bump when the drawing or the canvas path changes: old cache files are then ignored
MAX_UNEXPLAINED = 0.1  # a digit with more ink off its skeleton (a filled-in loop) is kept as written
PICK_SEED = 5  # which images are redrawn; fixed, so every run of a dataset shares one cache file
DRAW_SEED = 123


def cache_dir(data_dir: Path) -> Path:
    """Where renderings are kept: $BRNN_CACHE_DIR (shared by test sessions and machines' users) or <data>/cache."""
    return Path(os.environ.get("BRNN_CACHE_DIR") or Path(data_dir) / "cache")


def picked(n: int, share: float) -> torch.Tensor:
    """Indices (sorted) of the `share` of n training images that are redrawn: a function of (n, share) only."""
    chosen = np.random.default_rng(PICK_SEED).random(n) < share
    return torch.from_numpy(np.flatnonzero(chosen))


def draw(images: np.ndarray, seed: int = DRAW_SEED, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """(N, 28, 28) uint8 digits -> the same digits drawn on the canvas and prepared as the Predictor does."""
    rng = np.random.default_rng(seed)
    out = np.empty_like(images)
    for k, digit in enumerate(images):
        if progress is not None and k % 100 == 0:
            progress(k, len(images))
        x = None  # keep the original where a redrawing would not be the same digit
        if strokes.unexplained_ink(digit) <= MAX_UNEXPLAINED:
            x = canvas.preprocess(strokes.render(digit, rng, supersample=1), deslant=canvas.DESLANT)
        out[k] = digit if x is None else np.round(x.numpy() * 255).astype(np.uint8)
    return out


def drawn_copies(train_x: torch.Tensor, share: float, data_dir: Path,
                 progress: Callable[[str], None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices into train_x, their drawn versions (K, 28, 28) uint8): read from the cache, or drawn and cached."""
    idx = picked(len(train_x), share)
    if not len(idx):
        return idx, train_x[:0]
    return idx, drawn_cached(train_x[idx].numpy(), data_dir, progress)


def drawn_cached(images: np.ndarray, data_dir: Path, progress: Callable[[str], None] | None = None) -> torch.Tensor:
    """`draw(images)`, read from the cache file of these very images, or drawn and cached."""
    key = hashlib.sha1(images.tobytes()).hexdigest()[:16]
    path = cache_dir(data_dir) / f"as-drawn-v{VERSION}-{key}.npy"
    cached = _read(path, images)
    if cached is not None:
        return cached
    # One process draws, the others wait for its file (the dashboard draws the default dataset's in the background
    # when it starts; a run started meanwhile would otherwise draw the same digits again on the same cores).
    with _drawing_lock(path, progress):
        cached = _read(path, images)
        if cached is not None:
            return cached

        def say(k: int, n: int) -> None:
            if progress is not None:
                progress(f"drawing {n:,} training digits as canvas strokes, once for this dataset: {k:,}/{n:,}")

        drawn = draw(images, progress=say)
        blob = io.BytesIO()
        np.save(blob, drawn)
        with contextlib.suppress(OSError):  # a read-only or full disk only costs drawing them again next time
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, lambda fh: fh.write(blob.getvalue()))
    return torch.from_numpy(drawn)


def _read(path: Path, images: np.ndarray) -> torch.Tensor | None:
    try:
        cached = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None  # missing or torn (a writer killed mid-way cannot leave one: atomic_write)
    return torch.from_numpy(cached) if cached.shape == images.shape and cached.dtype == np.uint8 else None


@contextlib.contextmanager
def _drawing_lock(path: Path, progress: Callable[[str], None] | None) -> Iterator[None]:
    """Held while `path` is drawn (brnn_core.locks: the kernel drops it when its holder dies, so a killed drawer
    never blocks the next). A cache folder where no lock can be taken only costs drawing the digits twice."""
    lock_path = path.with_suffix(".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = try_lock(lock_path, path.parent)
        if lock is None:
            if progress is not None:
                progress("waiting for another process that is drawing these training digits as canvas strokes")
            lock = wait_lock(lock_path, path.parent)
    except OSError:  # LockError too: an unwritable or damaged cache folder
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()
