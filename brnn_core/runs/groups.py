"""Seed groups (runs whose training settings differ only in seed, index.seed_group) seen as one: a runs table
folded to one row per group with the mean ± std of its final metrics (the Runs page), and the spread itself
(the sample std, ddof=1), which `runs list --groups` prints too. Its curves' band is series.group_curve, built once
per version of its runs' files by runs.bands."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Spread:
    mean: float  # NaN without a value
    std: float  # sample std; NaN with fewer than two values
    n: int  # the values it was computed from (NaN values left out)

    def text(self, digits: int = 2) -> str:
        """'97.10 ± 0.30'; one value alone without '±'; none: ''."""
        if self.n == 0:
            return ""
        if self.n == 1:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}"


def spread(values: Iterable) -> Spread:
    """Mean and sample std of the finite numbers among `values` (text, None and NaN are left out)."""
    return _spread(pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(dtype=float))


@dataclass(frozen=True)
class Folded:
    """A runs table with each seed group of two or more runs as one row."""

    table: pd.DataFrame  # the rows, with an `n` column (runs behind each row)
    members: list[tuple[str, ...]]  # the run ids behind each row, in the table's order

    def identities(self) -> list[str]:
        """What each row is, whatever its position: the run id, or 'group:ID' for a seed group's row (a run id
        has no ':'). A selection kept by these follows its runs when new ones push the rows down."""
        return [f"group:{self.table['group'].iloc[k]}" if len(ids) > 1 else ids[0]
                for k, ids in enumerate(self.members)]

    def answers(self) -> list[frozenset[str]]:
        """Per row, the other identities that select it: its runs, and its group (a ticked run that gained a seed
        is now inside its group's row; a group left with one run is that run's row)."""
        return [frozenset({*ids, f"group:{group}"}) if isinstance(group, str) else frozenset(ids)
                for ids, group in zip(self.members, self.table["group"], strict=True)]

    def picked(self, rows: Iterable[int], with_data: Collection[str], default: int = 3
               ) -> tuple[list[str], dict[str, tuple[str, ...]]]:
        """The single runs and the groups (group id -> run ids) on the selected `rows`; with none selected, those
        of the first `default` rows that have a run in `with_data` (what an overlay shows unasked)."""
        rows = [k for k in rows if 0 <= k < len(self.members)]  # a selection the table outgrew (a new filter)
        rows = rows or [k for k, ids in enumerate(self.members) if set(ids) & set(with_data)][:default]
        singles = [self.members[k][0] for k in rows if len(self.members[k]) == 1]
        groups = {str(self.table["group"].iloc[k]): self.members[k] for k in rows if len(self.members[k]) > 1}
        return singles, groups


def unfolded(table: pd.DataFrame) -> Folded:
    """`table` as it is, one run a row (seeds not grouped)."""
    return Folded(table.assign(n=1), [(run_id,) for run_id in table["run_id"]])


def _members(table: pd.DataFrame) -> list[tuple[str, ...]]:
    """The run ids of each row-to-be, in the order of each group's first run. A damaged run (a `problem`) stays
    alone: its settings may be unreadable, and its problem must show on a row of its own."""
    problem = table["problem"] if "problem" in table else pd.Series("", index=table.index)
    rows: dict[str, list[str]] = {}
    for run_id, group, issue in zip(table["run_id"], table["group"], problem, strict=True):
        damaged = isinstance(issue, str) and issue != ""
        rows.setdefault(f"run:{run_id}" if damaged or not isinstance(group, str) else group, []).append(run_id)
    return [tuple(ids) for ids in rows.values()]


def has_groups(table: pd.DataFrame) -> bool:
    """True when folding `table` would put two or more runs on one row."""
    return not table.empty and any(len(ids) > 1 for ids in _members(table))


class _Column:
    """One column of a runs table as plain lists, read once per fold: a row per group then costs list indexing, not
    a pandas object per group and column (a thousand runs in groups of ten fold in milliseconds)."""

    def __init__(self, values: pd.Series):
        self.name, self.values = str(values.name), values.tolist()
        self.present, self.numeric = values.notna().tolist(), pd.api.types.is_numeric_dtype(values)

    def common(self, at: list[int]):
        """What a folded row of the runs at these positions shows in this column (not a spread): the one value
        all share, else the mean of numbers, a count of states, the union of tags, or the distinct texts."""
        values = [self.values[k] for k in at]
        present = [self.values[k] for k in at if self.present[k]]
        distinct = list(dict.fromkeys(present))
        if len(distinct) <= 1 and len(present) == len(values):
            return distinct[0] if distinct else values[0]
        if self.name == "state":
            return " · ".join(f"{n} {state}" for state, n in Counter(present).most_common())
        if self.name == "tags":
            return ",".join(sorted({t for text in present for t in str(text).split(",") if t}))
        if self.numeric:
            return float(np.mean(present)) if present else float("nan")
        return ", ".join(str(v) for v in distinct if str(v))


def _spread(numbers: np.ndarray) -> Spread:
    numbers = numbers[np.isfinite(numbers)]
    n = len(numbers)
    return Spread(float(numbers.mean()) if n else float("nan"), float(numbers.std(ddof=1)) if n > 1 else float("nan"),
                  n)


def fold_groups(table: pd.DataFrame, spread_columns: Sequence[str], digits: int = 2,
                totals: Sequence[str] = ()) -> Folded:
    """`table` (a runs table, newest first) with each seed group of two or more runs as one row: run_id reads
    'group ID · N runs', `spread_columns` hold 'mean ± std' text (every row's, so a column has one type),
    `totals` the sum over the runs (sizes), the other columns what `_Column.common` says. Groups sit where their
    newest run was."""
    members = _members(table)
    position = {run_id: k for k, run_id in enumerate(table["run_id"])}
    columns = [_Column(table[name]) for name in table.columns]
    totals = [t for t in totals if t in table.columns]
    numbers = {name: pd.to_numeric(table[name], errors="coerce").to_numpy(dtype=float)
               for name in [*spread_columns, *totals]}
    rows = []
    for ids in members:
        at = [position[run_id] for run_id in ids]
        row = {column.name: column.common(at) for column in columns}
        if len(ids) > 1:
            row["run_id"] = f"group {table['group'].iat[at[0]]} · {len(ids)} runs"
        for name in spread_columns:
            row[name] = _spread(numbers[name][at]).text(digits)
        for name in totals:
            values = numbers[name][at]
            row[name] = float(np.nansum(values)) if not np.isnan(values).all() else float("nan")
        rows.append({**row, "n": len(ids)})
    return Folded(pd.DataFrame(rows, columns=[*table.columns, "n"]), members)
