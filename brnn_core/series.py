"""Loss curves as numbers: TensorBoard's smoothing, and a group of runs' mean and std per step (a seed group's
band). No plotting here: `charts` draws these, and `runs.bands` computes them for many runs at once, so the CLI
side never imports Plotly."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


def ema(values: np.ndarray | pd.Series, weight: float) -> np.ndarray:
    """TensorBoard's debiased exponential moving average (weight 0 = raw, 0.99 = very smooth)."""
    values = np.asarray(values, dtype=float)
    out = np.empty_like(values)
    last, debias = 0.0, 0.0
    for i, v in enumerate(values):
        if not math.isfinite(v):
            out[i] = v
            continue
        last = last * weight + (1 - weight) * v
        debias = debias * weight + (1 - weight)
        out[i] = last / debias if debias else v
    return out


def ema_rows(rows: Sequence[np.ndarray], weight: float) -> list[np.ndarray]:
    """`ema` of each array, computed for all of them at once (one pass over the longest, not one per array): a
    seed group's thousand runs are smoothed in a few milliseconds. Same values as `ema` on each."""
    if not rows:
        return []
    width = max(len(r) for r in rows)
    padded = np.full((len(rows), width), np.nan)  # a NaN tail leaves the values before it as they are
    for k, r in enumerate(rows):
        padded[k, :len(r)] = r
    out = np.empty_like(padded)
    last, debias = np.zeros(len(rows)), np.zeros(len(rows))
    for i in range(width):
        v = padded[:, i]
        finite = np.isfinite(v)
        last = np.where(finite, last * weight + (1 - weight) * np.where(finite, v, 0.0), last)
        debias = np.where(finite, debias * weight + (1 - weight), debias)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, i] = np.where(finite & (debias != 0), last / debias, v)
    return [out[k, :len(r)] for k, r in enumerate(rows)]


@dataclass(frozen=True, eq=False)
class GroupCurve:
    """A group's curve: at each x every run has logged, the mean and sample std across its runs. Compared by
    identity (eq=False): a cache hands out one object per version of the runs behind it, so `a == b` is cheap
    and says whether a chart built from `a` is still up to date."""

    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray  # NaN where fewer than two runs have the point (a band of one run is no band)
    n: int  # runs behind it

    @property
    def lower(self) -> np.ndarray:
        return self.mean - self.std

    @property
    def upper(self) -> np.ndarray:
        return self.mean + self.std


def _same_steps(xs: list[np.ndarray]) -> bool:
    """True when every run logged the same strictly increasing x values (seeds of one setting do)."""
    first = xs[0]
    return bool(len(first) < 2 or (np.diff(first) > 0).all()) and all(np.array_equal(first, x) for x in xs[1:])


def group_curve(series: Iterable[tuple[Sequence[float], Sequence[float]]]) -> GroupCurve | None:
    """Mean and std per x of several runs' (x, y) curves, on the x values every run has: a seed that is still
    training (or stopped early) shortens the band instead of leaving fewer runs behind its end, where the mean
    would jump. A run logging one x twice counts its last value. None when no run has a point."""
    pairs = [(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in series if len(x)]
    if not pairs:
        return None
    if _same_steps([x for x, _ in pairs]):  # the usual case, without a pandas object per run
        common, stack = pairs[0][0], np.vstack([y for _, y in pairs])
    else:
        frames = [pd.Series(y, index=x).groupby(level=0).last() for x, y in pairs]
        index = frames[0].index
        for frame in frames[1:]:
            index = index.intersection(frame.index)
        index = index.sort_values()
        common, stack = index.to_numpy(), np.vstack([frame.loc[index].to_numpy() for frame in frames])
    std = stack.std(axis=0, ddof=1) if len(pairs) > 1 else np.full(len(common), np.nan)
    return GroupCurve(common, stack.mean(axis=0), std, len(pairs))
