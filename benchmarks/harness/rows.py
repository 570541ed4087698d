"""One result row of the suite and the statistics that make it: medians, ranges, alternated rounds."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class Row:
    bench: str
    case: str
    metric: str
    value: float
    unit: str
    lo: float | None = None  # range over repetitions (min, max); for a ratio, of the pairwise ratios
    hi: float | None = None
    reps: int = 1
    target: str = ""  # e.g. ">= 1.1" (a goal to read against, never asserted)
    met: str = ""  # yes / no when there is a target
    note: str = ""

    @property
    def spread(self) -> float | None:
        """(max - min) / |median| in percent: above about 20%, the machine was too busy to trust the row."""
        if self.reps < 2 or self.lo is None or self.hi is None or not self.value or \
                self.metric not in ("throughput", "time", "ratio", "memory"):
            return None  # an overhead near 0 or a latency distribution has no meaningful relative spread
        return 100 * (self.hi - self.lo) / abs(self.value)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def alternate(cases: dict[str, Callable[[], float]], reps: int, log: Callable[[str], None],
              label: str = "") -> dict[str, list[float]]:
    """Call each case once per round, in turn (A B A B ...), `reps` rounds; values per case."""
    out: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(reps):
        for name, fn in cases.items():
            out[name].append(fn())
            log(f"{label}{name}: {out[name][-1]:,.1f} (round {r + 1}/{reps})")
    return out


def stat_row(bench: str, case: str, metric: str, values: list[float], unit: str, note: str = "") -> Row:
    """The median of repeated measurements, with their range."""
    return Row(bench, case, metric, median(values), unit, min(values), max(values), len(values), note=note)


def throughput_row(bench: str, case: str, values: list[float], note: str = "", unit: str = "samples/s") -> Row:
    return stat_row(bench, case, "throughput", values, unit, note)


def ratio_row(bench: str, case: str, a: list[float], b: list[float], *, target: float | None = None,
              note: str = "") -> Row:
    """median(a) / median(b), with the range of the round-by-round ratios a[i] / b[i]."""
    pairs = [x / y for x, y in zip(a, b, strict=False) if y > 0]
    value = median(a) / median(b) if median(b) > 0 else float("nan")
    row = Row(bench, case, "ratio", value, "x", min(pairs, default=None), max(pairs, default=None), len(pairs),
              note=note)
    if target is not None:
        row.target, row.met = f">= {target:g}", "yes" if value >= target else "no"
    return row
