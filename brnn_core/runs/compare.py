"""Two runs side by side: their config.json and environment.json flattened to one row per setting, the
settings that differ first (the Runs page's comparison of two selected runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from brnn_core.environment import FILE as ENVIRONMENT_FILE
from brnn_core.fileio import read_json
from brnn_core.runs.rundir import Run

# Rows that name the run or the moment rather than how it was made: they differ between any two runs.
NOT_COMPARED = ("config.created", "environment.recorded")


def flatten(data: object, prefix: str) -> dict[str, object]:
    """{"a": {"b": 1}, "c": [1, 2]} -> {"prefix.a.b": 1, "prefix.c": "1 2"}; a list of objects by index."""
    if isinstance(data, dict):
        out: dict[str, object] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}"))
        return out
    if isinstance(data, list) and any(isinstance(item, dict | list) for item in data):
        out = {}
        for k, item in enumerate(data):
            out.update(flatten(item, f"{prefix}.{k}"))
        return out
    if isinstance(data, list):
        return {prefix: " ".join(str(item) for item in data)}
    return {prefix: data}


def records(run: Run) -> dict[str, object]:
    """A run's config.json and environment.json as flat rows ({} for a file it lacks)."""
    environment = read_json(Path(run.path) / ENVIRONMENT_FILE, {})
    return {**flatten(run.config(), "config"), **flatten(environment if isinstance(environment, dict) else {},
                                                         "environment")}


def side_by_side(a: Run, b: Run) -> pd.DataFrame:
    """One row per setting of either run: `setting`, the two runs' values (as text, "" where a run has none),
    `differs`; the differing rows first, each part in the settings' order."""
    left, right = records(a), records(b)
    rows = []
    for key in sorted(set(left) | set(right)):
        if key in NOT_COMPARED:
            continue
        va, vb = _text(left.get(key)), _text(right.get(key))
        rows.append({"setting": key, a.id: va, b.id: vb, "differs": va != vb})
    frame = pd.DataFrame(rows, columns=["setting", a.id, b.id, "differs"])
    return frame.sort_values("differs", ascending=False, kind="stable").reset_index(drop=True)


def _text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)
