"""Seed groups' bands (the mean ± std of their runs' loss curves), built once per version of the files behind them.

A group of a thousand seeds draws one band, and reading a thousand metrics.csv files into DataFrames on every
rerun costs seconds. `BandCache` keeps each run's two loss curves (training loss by step, validation loss by
epoch), parsed straight from metrics.csv once per version of that file (mtime, size, inode), and each band, built
once per (its runs and their versions, which curve, smoothing). A rerun then costs a stat per run. The pages ask
`RunIndex.band`: one cache per runs folder, shared by every session (thread-safe); a page that draws many groups
(a matrix of bands) asks it once per group.
"""

from __future__ import annotations

import math
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from brnn_core.fileio import read_complete_lines
from brnn_core.runs.rundir import METRIC_COLUMNS, validate_run_id
from brnn_core.series import GroupCurve, ema_rows, group_curve

WHATS = ("train", "val")  # training loss by step (smoothed), validation loss by epoch
Version = tuple[int, int, int] | None  # (mtime_ns, size, inode) of metrics.csv; None when it is missing
_STEP, _EPOCH, _SPLIT, _LOSS = (METRIC_COLUMNS.index(c) for c in ("step", "epoch", "split", "loss"))


@dataclass(frozen=True)
class LossCurves:
    """One run's curves as a compare chart draws them (charts.run_curve reads the same from a DataFrame)."""

    train: tuple[np.ndarray, np.ndarray]  # (step, training loss) of every logged point
    val: tuple[np.ndarray, np.ndarray]  # (epoch, validation loss) of every epoch's end


_NOTHING = (np.empty(0), np.empty(0))
NO_CURVES = LossCurves(_NOTHING, _NOTHING)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def read_loss_curves(path: Path) -> LossCurves:
    """A run's metrics.csv (complete lines with every column, as Run.metrics reads it) as its two loss curves."""
    lines, _ = read_complete_lines(path)
    commas = len(METRIC_COLUMNS) - 1
    points: dict[str, tuple[list[float], list[float]]] = {"train": ([], []), "val": ([], [])}
    for line in lines[1:]:
        if line.count(",") != commas:
            continue
        parts = line.split(",")
        xs_ys = points.get(parts[_SPLIT])
        if xs_ys is not None:
            xs_ys[0].append(_number(parts[_STEP if parts[_SPLIT] == "train" else _EPOCH]))
            xs_ys[1].append(_number(parts[_LOSS]))
    arrays = {k: (np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for k, (x, y) in points.items()}
    return LossCurves(arrays["train"], arrays["val"])


def file_version(path: Path | str) -> Version:
    """(mtime_ns, size, inode) of a regular file; None for a missing one, or a folder or device in its place."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino) if stat.S_ISREG(st.st_mode) else None


class BandCache:
    """Runs' loss curves and groups' bands, each kept until a file behind it changes; thread-safe. `max_runs` and
    `max_bands` bound the memory (the least recently used go first)."""

    def __init__(self, max_runs: int = 20_000, max_bands: int = 64):
        self.max_runs, self.max_bands = max_runs, max_bands
        self._lock = threading.Lock()
        self._curves: OrderedDict[str, tuple[Version, LossCurves]] = OrderedDict()
        self._bands: OrderedDict[tuple, GroupCurve | None] = OrderedDict()
        self.reads = 0  # metrics.csv files parsed so far (how the tests see the cache work)
        self.builds = 0  # bands computed so far

    def band(self, runs_dir: Path | str, run_ids: Sequence[str], what: str = "train",
             smoothing: float = 0.0) -> GroupCurve | None:
        """The mean ± std band of these runs' `what` curve ("train": training loss by step, each run smoothed
        with `smoothing` first; "val": validation loss by epoch) on the x values every run has; None when no run
        has a point. The same object is returned while no run's metrics.csv changed."""
        if what not in WHATS:
            raise ValueError(f"what={what!r}: use one of {', '.join(WHATS)}")
        for run_id in run_ids:
            validate_run_id(run_id)  # a run id names a folder inside runs_dir, never a path out of it
        paths = [os.path.join(runs_dir, run_id, "metrics.csv") for run_id in run_ids]
        versions = tuple(file_version(p) for p in paths)
        key = (what, float(smoothing) if what == "train" else 0.0, tuple(run_ids), versions)
        with self._lock:
            if key in self._bands:
                self._bands.move_to_end(key)
                return self._bands[key]
        curves = [getattr(self._run_curves(p, v), what) for p, v in zip(paths, versions, strict=True)]
        ys = ema_rows([y for _, y in curves], smoothing) if what == "train" else [y for _, y in curves]
        band = group_curve((x, y) for (x, _), y in zip(curves, ys, strict=True))
        with self._lock:
            self.builds += 1
            self._bands[key] = band
            while len(self._bands) > self.max_bands:
                self._bands.popitem(last=False)
        return band

    def _run_curves(self, path: str, version: Version) -> LossCurves:
        with self._lock:
            hit = self._curves.get(path)
            if hit is not None and hit[0] == version:
                self._curves.move_to_end(path)
                return hit[1]
        try:  # a damaged run draws nothing here; the runs table's problem column says why
            curves = read_loss_curves(Path(path)) if version is not None else NO_CURVES
        except OSError:
            curves = NO_CURVES
        with self._lock:
            self.reads += 1
            self._curves[path] = (version, curves)
            self._curves.move_to_end(path)
            while len(self._curves) > self.max_runs:
                self._curves.popitem(last=False)
        return curves
