"""Every run's summary, read once and read again only when its files change.

Sweeps leave hundreds of runs in the runs folder, and the dashboard's pages rerun on every click (the
Predict page on every stroke). Reading every run's config.json, status.json and metrics.csv each time
made every rerun cost time proportional to the history (the table in bench/README.md, "Run history").
A `RunIndex` keeps, per run, what the tables and pickers need, keyed by the (mtime_ns, size) of those
three files: a rerun costs one directory scan and three `stat` calls per run, and only files that
changed are parsed again. It is shared by every browser session (`st.cache_resource`), hence the lock.

What is never cached: whether an active run's worker is still alive (a killed worker changes no file),
and the duration of an active run (it grows with the clock).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .fileio import read_complete_lines
from .runs import METRIC_COLUMNS, SUMMARY_COLUMNS, CheckpointChoice, Run, true_status
from .states import ACTIVE_STATES

FILES = ("config.json", "status.json", "metrics.csv")
Signature = tuple[tuple[int, int] | None, ...]  # (mtime_ns, size) of FILES, None for a missing file


@dataclass
class ValSummary:
    """What the tables and pickers need from metrics.csv (its val and test rows)."""

    best_val_acc: float | None = None  # highest validation accuracy
    acc_at_best_loss: float | None = None  # validation accuracy where the validation loss was lowest (best.pt)
    last_val_acc: float | None = None  # the last validation accuracy (last.pt after an epoch)
    test_acc: float | None = None  # the last test row's accuracy


@dataclass
class Entry:
    signature: Signature
    config: dict
    raw_status: dict
    metrics: ValSummary


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def val_summary(lines: list[str]) -> ValSummary:
    """Summarise metrics.csv lines (header first) without building a DataFrame: only val/test rows matter."""
    commas = len(METRIC_COLUMNS) - 1
    split_at, loss_at, acc_at = (METRIC_COLUMNS.index(c) for c in ("split", "loss", "accuracy"))
    out = ValSummary()
    best_loss = math.inf
    for line in lines[1:]:
        if line.count(",") != commas:
            continue
        parts = line.split(",")
        split = parts[split_at]
        if split not in ("val", "test"):
            continue
        acc, loss = _number(parts[acc_at]), _number(parts[loss_at])
        acc_or_none = None if math.isnan(acc) else acc
        if split == "test":
            out.test_acc = acc_or_none
            continue
        out.last_val_acc = acc_or_none
        if acc_or_none is not None and (out.best_val_acc is None or acc > out.best_val_acc):
            out.best_val_acc = acc
        if loss < best_loss:  # the first lowest, as pandas' idxmin; NaN never compares lower
            best_loss, out.acc_at_best_loss = loss, acc_or_none
    return out


def summary_row(run_id: str, config: dict, status: dict, metrics: ValSummary, now: float | None = None) -> dict:
    """One row of the runs table (SUMMARY_COLUMNS)."""
    tc = config.get("train", {})
    started = status.get("started") or status.get("created")
    active = status.get("state") in ACTIVE_STATES
    ended = status.get("ended") or ((now or time.time()) if active else status.get("updated"))
    return {
        "run_id": run_id, "state": status.get("state"), "dataset": tc.get("dataset"),
        "hidden": tc.get("hidden_size"), "layers": tc.get("num_layers"), "head": tc.get("head"),
        "batch": tc.get("batch_size"), "lr": tc.get("lr"), "optimizer": tc.get("optimizer"),
        "epochs": tc.get("epochs"), "step": status.get("step"), "best_val_acc": metrics.best_val_acc,
        "test_acc": metrics.test_acc,
        "duration_s": round(float(ended) - float(started), 1) if started and ended else None,
        "device": config.get("device"),
    }


def _signature(path: Path) -> Signature:
    out = []
    for name in FILES:
        try:
            st = os.stat(path / name)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_entry(path: Path, signature: Signature) -> Entry:
    lines, _ = read_complete_lines(path / "metrics.csv")
    return Entry(signature, _read_json(path / "config.json"), _read_json(path / "status.json"), val_summary(lines))


class RunIndex:
    """The runs in one folder, newest first, with what tables and pickers show; thread-safe.

    Every call rescans the folder (a new or deleted run shows at once) and re-reads only the runs whose
    config.json, status.json or metrics.csv changed since the last call."""

    def __init__(self, runs_dir: Path | str):
        self.runs_dir = Path(runs_dir)
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self.reads = 0  # runs (re)read from disk so far: how tests and the bench see the cache work
        self._frames = MetricsCache()

    def refresh(self) -> list[tuple[str, Entry]]:
        """(run id, entry) for every complete run, newest first."""
        try:
            with os.scandir(self.runs_dir) as it:
                names = [e.name for e in it if not e.name.startswith(".") and e.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            names = []
        out = []
        with self._lock:
            for name in sorted(names, reverse=True):
                path = self.runs_dir / name
                sig = _signature(path)
                if sig[0] is None:  # no config.json: not a run (yet)
                    continue
                entry = self._entries.get(name)
                if entry is None or entry.signature != sig:
                    entry = self._entries[name] = read_entry(path, sig)
                    self.reads += 1
                out.append((name, entry))
            for gone in set(self._entries) - {name for name, _ in out}:
                del self._entries[gone]
        return out

    def runs(self) -> list[Run]:
        return [Run(self.runs_dir / name) for name, _ in self.refresh()]

    def statuses(self) -> dict[str, dict]:
        """run id -> its true status (an active run whose worker is gone reads `interrupted`), newest first."""
        return {name: true_status(dict(entry.raw_status)) for name, entry in self.refresh()}

    def table(self) -> pd.DataFrame:
        now = time.time()
        rows = [summary_row(name, e.config, true_status(dict(e.raw_status)), e.metrics, now)
                for name, e in self.refresh()]
        return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)

    def metrics(self, run_id: str) -> pd.DataFrame:
        """One run's whole metrics.csv (shared between callers: do not modify it)."""
        return self._frames.metrics(Run(self.runs_dir / run_id))

    def checkpoint_choices(self) -> list[CheckpointChoice]:
        """Every run's best.pt and last.pt, highest validation accuracy first (best before last on a tie)."""
        choices = []
        for name, entry in self.refresh():
            run = Run(self.runs_dir / name)
            for path, kind, acc in ((run.best_ckpt, "best", entry.metrics.acc_at_best_loss),
                                    (run.last_ckpt, "last", entry.metrics.last_val_acc)):
                if path.is_file():
                    choices.append(CheckpointChoice(name, kind, path, acc))
        score = lambda c: (c.val_acc if c.val_acc is not None else -1.0) + (0.001 if c.kind == "best" else 0.0)
        return sorted(choices, key=score, reverse=True)


class MetricsCache:
    """Whole metrics.csv DataFrames of the few runs a page overlays, re-read only when the file changes."""

    def __init__(self, max_runs: int = 16):
        self.max_runs = max_runs
        self._lock = threading.Lock()
        self._frames: dict[Path, tuple[tuple[int, int] | None, pd.DataFrame]] = {}

    def metrics(self, run: Run) -> pd.DataFrame:
        try:
            st = os.stat(run.metrics_path)
            sig = (st.st_mtime_ns, st.st_size)
        except OSError:
            sig = None
        with self._lock:
            hit = self._frames.get(run.metrics_path)
            if hit is not None and hit[0] == sig:
                return hit[1]
        frame = run.metrics()
        with self._lock:
            self._frames.pop(run.metrics_path, None)
            self._frames[run.metrics_path] = (sig, frame)
            while len(self._frames) > self.max_runs:  # dicts keep insertion order: drop the oldest
                del self._frames[next(iter(self._frames))]
        return frame
