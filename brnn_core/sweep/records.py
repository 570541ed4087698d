"""The sweep record: `RUNS/sweeps/<sweep_id>/`, a user-facing format like the run directory.

sweep.json, events.jsonl, control.jsonl, Tune's tune/ folder, driver.log and the `ray` link (what each holds:
docs/run-directory.md, "Sweep records"). Each trial is an ordinary run directory in RUNS/ whose config.json carries
`sweep_id` and `sweep` (its number, Tune's trial id, the searched values), so every page shows it like any run.
A sweep whose driver died without saying so reads as `interrupted`, like a run.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from brnn_core.config import TrainConfig
from brnn_core.fileio import append_line, atomic_write_json, read_complete_lines, read_json
from brnn_core.runs.index import RunIndex
from brnn_core.runs.rundir import (
    Run,
    RunError,
    create_run,
    new_run_config,
    now_iso,
    validate_run_id,
)
from brnn_core.runs.status import effective_status, last_pt_pruned, sweep_driver_alive
from brnn_core.states import ACTIVE_STATES, State
from brnn_core.sweep.space import SearchSpec

FORMAT_VERSION = 1
# metric name -> (metrics.csv column of the val rows, Tune mode)
METRICS = {"val_loss": ("loss", "min"), "val_accuracy": ("accuracy", "max")}
SWEEP_ONLY = ("cpu_threads",)  # set by the sweep's resources, not a setting of the winner
RESUMABLE = (State.STOPPED, State.INTERRUPTED, State.FAILED)  # sweep states `sweep --resume` continues
SCHEDULER_STOPS = ("asha",)  # a trial a scheduler stopped early has ended for good; other stops can be resumed


def sweeps_dir(runs_dir: Path) -> Path:
    return Path(runs_dir) / "sweeps"


def new_sweep_id(name: str | None = None) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name or "sweep").strip("-")[:24] or "sweep"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def trial_index(trial_id: str) -> int | None:
    """Tune's trial ids end in a counter (`3f2a1_00003` -> 3)."""
    suffix = str(trial_id).rsplit("_", 1)[-1]
    return int(suffix) if suffix.isdigit() else None


def trial_run_id(sweep_id: str, trial_id: str) -> str:
    """The run id of a Tune trial: `<sweep_id>-t03` for Tune's `3f2a1_00003`."""
    index = trial_index(trial_id)
    return f"{sweep_id}-t{index:02d}" if index is not None else f"{sweep_id}-{trial_id}"


def create_trial_run(runs_dir: Path, data_dir: Path, sweep_id: str, trial_id: str, values: dict,
                     searched: dict, scheduler: str, metric: str) -> Run:
    """A trial's run directory: its TrainConfig (`values`: the base with the searched fields filled in), with
    `sweep_id` and its place in the sweep in config.json. Made by the trial where it trains, or by the driver
    for a trial that failed before it could make its own (a node without the shared folders)."""
    config = new_run_config(TrainConfig.from_dict(values), Path(data_dir))
    config.update(sweep_id=sweep_id, sweep={"trial": trial_index(trial_id), "trial_id": trial_id,
                                            "searched": searched, "scheduler": scheduler, "metric": metric})
    return create_run(Path(runs_dir), config, run_id=trial_run_id(sweep_id, trial_id))


def trial_number(run_id: str) -> str:
    return run_id.rsplit("-", 1)[-1]


class Sweep:
    """Reads and writes one sweep folder. Only the driver writes sweep.json; anyone may ask it to stop."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.id = self.path.name

    @property
    def json_path(self) -> Path:
        return self.path / "sweep.json"

    @property
    def control_path(self) -> Path:
        return self.path / "control.jsonl"

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def tune_dir(self) -> Path:
        return self.path / "tune"

    @property
    def log_path(self) -> Path:
        return self.path / "driver.log"

    @property
    def runs_dir(self) -> Path:
        return self.path.parent.parent

    def exists(self) -> bool:
        return self.json_path.is_file()

    def raw(self) -> dict:
        return read_json(self.json_path, {}) or {}

    def info(self) -> dict:
        """sweep.json with the true state: a running sweep whose driver is gone is `interrupted`."""
        info = self.raw()
        if info.get("state") == State.RUNNING and not sweep_driver_alive(info):
            info["state"] = State.INTERRUPTED
            info["message"] = (f"the sweep's driver ended without saying so (killed, crashed, or the cluster head "
                               f"was lost); `python -m brnn_core sweep --resume {self.id}` continues it")
        return info

    def write(self, **fields: Any) -> dict:
        info = self.raw()
        info.update(fields, updated=time.time())
        atomic_write_json(self.json_path, info)
        return info

    def log_event(self, kind: str, message: str, **extra: Any) -> None:
        append_line(self.events_path, json.dumps({"time": now_iso(), "kind": kind, "message": message, **extra},
                                                 default=str))

    def request_stop(self, source: str = "user") -> None:
        """Ask the driver to stop every trial (each saves last.pt) and start no new one."""
        append_line(self.control_path, json.dumps({"cmd": "stop", "time": now_iso(), "source": source}))

    def stop_requested(self) -> bool:
        """One stat while nothing was asked (the driver calls this every loop)."""
        try:
            if self.control_path.stat().st_size == 0:
                return False
        except FileNotFoundError:
            return False
        lines, _ = read_complete_lines(self.control_path)
        return any('"stop"' in line for line in lines)

    def stop_source(self) -> str | None:
        """Who asked the sweep to stop first (user, dashboard, keyboard, signal, budget), or None."""
        if not self.stop_requested():
            return None
        for line in read_complete_lines(self.control_path)[0]:
            with contextlib.suppress(ValueError):
                command = json.loads(line)
                if command.get("cmd") == "stop":
                    return command.get("source")
        return None

    def clear_requests(self) -> None:
        """Forget earlier stop requests (a resumed sweep starts with none)."""
        if self.control_path.exists():
            self.control_path.write_text("")

    def specs(self) -> list[SearchSpec]:
        return [SearchSpec.from_dict(k, v) for k, v in (self.raw().get("search") or {}).items()]

    def trial_runs(self) -> list[Run]:
        """The trials' run directories that exist, in trial order."""
        runs = [Run(self.runs_dir / rid) for rid in self.raw().get("trials") or []]
        return [r for r in runs if r.exists()]


def resolve_sweep(runs_dir: Path, sweep_id: str) -> Sweep:
    try:
        validate_run_id(sweep_id)
    except RunError:
        raise RunError(f"{sweep_id!r} is not a valid sweep id (letters, digits, '.', '_', '-' only)") from None
    sweep = Sweep(sweeps_dir(runs_dir) / sweep_id)
    if not sweep.exists():
        raise RunError(f"no sweep {sweep_id!r} in {sweeps_dir(runs_dir).resolve()}")
    return sweep


def list_sweeps(runs_dir: Path) -> list[Sweep]:
    """Every sweep with a sweep.json, newest first."""
    root = sweeps_dir(runs_dir)
    if not root.is_dir():
        return []
    found = [Sweep(p) for p in root.iterdir() if p.is_dir() and (p / "sweep.json").is_file()]
    return sorted(found, key=lambda s: s.id, reverse=True)


# ---------------------------------------------------------------- reading trials
@dataclass
class TrialScore:
    """A trial's metric: the best value over its validation rows (and at which epoch), and the last one."""

    best: float | None
    best_epoch: float | None
    last: float | None


def score(run: Run, metric: str) -> TrialScore:
    column, mode = METRICS[metric]
    val = run.metrics()
    val = val[val["split"] == "val"].dropna(subset=[column])
    if not len(val):
        return TrialScore(None, None, None)
    row = val.loc[val[column].idxmin() if mode == "min" else val[column].idxmax()]
    return TrialScore(float(row[column]), float(row["epoch"]), float(val[column].iloc[-1]))


def ranked(runs: list[Run], metric: str) -> list[tuple[Run, TrialScore]]:
    """Trials with a score, best first."""
    scored = [(r, score(r, metric)) for r in runs]
    scored = [(r, s) for r, s in scored if s.best is not None]
    sign = 1.0 if METRICS[metric][1] == "min" else -1.0
    return sorted(scored, key=lambda rs: sign * rs[1].best)


def best_trial(sweep: Sweep) -> dict | None:
    """{run_id, metric, value, epoch} of the best trial so far, or None before any epoch ended."""
    metric = sweep.raw().get("metric", "val_loss")
    top = ranked(sweep.trial_runs(), metric)
    if not top:
        return None
    run, s = top[0]
    return {"run_id": run.id, "metric": metric, "value": s.best, "epoch": s.best_epoch}


class Leaderboard:
    """Every trial's best metric so far, kept in memory from Tune's results as they arrive.

    The driver ranks trials after every result (the best for sweep.json, which last.pt to keep); reading every
    trial's metrics.csv for that made each result cost more the more trials there were, on Tune's critical path.
    Here a result costs the same at trial 200 as at trial 10."""

    def __init__(self, metric: str):
        self.metric = metric
        self.sign = 1.0 if METRICS[metric][1] == "min" else -1.0
        self.scores: dict[str, tuple[float, float]] = {}  # run id -> (best value, its epoch)
        self.leader: str | None = None  # a trial's score only improves, so the sweep's best changes only on add

    def add(self, run_id: str, value: float, epoch: float) -> bool:
        """Record one result; True when the sweep's best changed. O(1): no sort."""
        old = self.scores.get(run_id)
        if old is not None and self.sign * value >= self.sign * old[0]:
            return False
        self.scores[run_id] = (float(value), float(epoch))
        if self.leader is not None and self.leader != run_id and \
                self.sign * value >= self.sign * self.scores[self.leader][0]:
            return False
        self.leader = run_id
        return True

    def ranking(self) -> list[str]:
        """Run ids, best first (sorted: asked for once per ended trial, to prune)."""
        return sorted(self.scores, key=lambda rid: self.sign * self.scores[rid][0])

    def best(self) -> dict | None:
        if self.leader is None:
            return None
        value, epoch = self.scores[self.leader]
        return {"run_id": self.leader, "metric": self.metric, "value": value, "epoch": epoch}


BEST_CONFIG = "best-config.json"


def write_best_config(sweep: Sweep, best: dict | None) -> Path | None:
    """sweeps/<id>/best-config.json: the best trial's settings as it trains with them now (PBT's and live changes
    included), a file `train --config` takes, so the winner can be trained again in full."""
    if not best:
        return None
    run = Run(sweep.runs_dir / best["run_id"])
    train = {**run.config().get("train", {}), **(run.stored_status().get("live") or {})}
    known = set(TrainConfig.field_names())
    values = {k: v for k, v in train.items() if k in known and k not in SWEEP_ONLY}
    path = sweep.path / BEST_CONFIG
    atomic_write_json(path, values)
    return path


def trials_table(sweep: Sweep, index: RunIndex | None = None) -> pd.DataFrame:
    """One row per trial: state, searched values, progress, metric, why it ended early, last.pt.

    Read through `index` (the pages share one per runs folder): a trial's files are parsed again only when they
    changed, so a rerun with hundreds of trials costs a few stat calls each."""
    info = sweep.raw()
    metric = info.get("metric", "val_loss")
    keys = list((info.get("search") or {}).keys())
    entries = (index or RunIndex(sweep.runs_dir)).entries(info.get("trials") or [])
    rows = []
    for run_id in info.get("trials") or []:
        entry = entries.get(run_id)
        if entry is None:
            continue
        status, cfg, m = effective_status(dict(entry.stored_status)), entry.config, entry.metrics
        best, last = (m.best_val_loss, m.last_val_loss) if metric == "val_loss" else (m.best_val_acc, m.last_val_acc)
        searched = (cfg.get("sweep") or {}).get("searched") or {}
        live = status.get("live") or {}
        rows.append({"trial": trial_number(run_id), "run_id": run_id, "state": status.get("state"),
                     **{k: live.get(k, searched.get(k)) for k in keys},  # PBT changes lr/clip live
                     "epoch": status.get("epoch"), "epochs": live.get("epochs", cfg.get("train", {}).get("epochs")),
                     f"best {metric}": best, f"last {metric}": last,
                     "note": status.get("message") if status.get("stopped_by") or status.get("state") in (
                         State.FAILED, State.DIVERGED, State.INTERRUPTED) else "",
                     "last.pt": "kept" if entry.checkpoints[1] else "pruned" if last_pt_pruned(status) else "none"})
    columns = ["trial", "run_id", "state", *keys, "epoch", "epochs", f"best {metric}", f"last {metric}", "note",
               "last.pt"]
    return pd.DataFrame(rows, columns=columns)


def metric_curves(sweep: Sweep, index: RunIndex | None = None) -> dict[str, pd.DataFrame]:
    """run id -> its validation rows (epoch, loss, accuracy), for the all-trials chart (through `index`)."""
    trials = sweep.raw().get("trials") or []
    entries = (index or RunIndex(sweep.runs_dir)).entries(trials)
    return {rid: pd.DataFrame(list(entries[rid].metrics.val_points), columns=["epoch", "loss", "accuracy"])
            for rid in trials if rid in entries}


def counts(sweep: Sweep) -> dict[str, int]:
    """How many trials are in each state (active ones counted as running)."""
    out: dict[str, int] = {}
    for run in sweep.trial_runs():
        state = run.status().get("state")
        key = State.RUNNING if state in ACTIVE_STATES else state
        out[key] = out.get(key, 0) + 1
    return out
