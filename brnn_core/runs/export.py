"""Runs out in bulk: one long table of every metrics row of the selected runs, with each run's id, seed group,
tags and training settings as columns (`runs export`, the Runs page's download), and the seed groups' summary
(mean ± std of their final metrics, `runs list --groups`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from brnn_core.config import architecture
from brnn_core.runs.groups import spread
from brnn_core.runs.rundir import Run

FORMATS = {".csv": "csv", ".parquet": "parquet"}
GROUP_METRICS = ("best_val_acc", "test_acc")


def long_table(runs_dir: Path, table: pd.DataFrame) -> pd.DataFrame:
    """Every metrics.csv row of the runs in `table` (a runs table), with run_id, group, tags, state and the
    run's training settings (`train.*` in config.json) as columns."""
    frames = []
    for row in table.to_dict("records"):
        run = Run(Path(runs_dir) / row["run_id"])
        metrics = run.metrics()
        train = run.config().get("train") or {}
        settings = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                    for k, v in {**(architecture(train) if train else {}), **train}.items()}
        extra = {"run_id": row["run_id"], "group": row.get("group"), "tags": row.get("tags") or "",
                 "state": row.get("state"), **{f"train.{k}": v for k, v in settings.items()}}
        frames.append(metrics.assign(**extra))
    if not frames:
        return pd.DataFrame(columns=["run_id", "group", "tags", "state"])
    out = pd.concat(frames, ignore_index=True)
    first = ["run_id", "group", "tags", "state"]
    return out[first + [c for c in out.columns if c not in first]]


def write_table(frame: pd.DataFrame, out: Path) -> Path:
    """`frame` as CSV or Parquet, by the file's suffix (ValueError for another)."""
    out = Path(out)
    kind = FORMATS.get(out.suffix.lower())
    if kind is None:
        raise ValueError(f"{out.name}: write .csv or .parquet")
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "csv":
        frame.to_csv(out, index=False)
    else:
        frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object}).to_parquet(out, index=False)
    return out


def group_summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per seed group: its runs (n), seeds, and mean and std of each final metric (std NaN for n=1)."""
    if table.empty:
        return pd.DataFrame(columns=["group", "n", "runs"])
    rows = []
    for group, runs in table.groupby("group", sort=False):
        row = {"group": group, "n": len(runs), "runs": " ".join(runs["run_id"]),
               **{name: runs[name].iloc[0] for name in ("dataset", "cell", "bidirectional", "hidden", "lr")
                  if name in runs}}
        for metric in GROUP_METRICS:
            summary = spread(runs[metric])
            row[f"{metric}_mean"], row[f"{metric}_std"] = summary.mean, summary.std
        rows.append(row)
    return pd.DataFrame(rows)
