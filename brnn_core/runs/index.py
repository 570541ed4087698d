"""Every run's summary, read once and read again only when its files change.

Sweeps leave hundreds of runs and the pages rerun on every click (Predict on every stroke), so reading every
run's files each time would make a rerun cost time proportional to the history. A `RunIndex` keeps what the
tables and pickers need, keyed by the (mtime_ns, size) of config.json, status.json and metrics.csv; it is shared
by every browser session (`st.cache_resource`), hence the lock. Never cached: whether an active run's worker is
alive (a killed worker changes no file) and an active run's duration.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from brnn_core.config import RECORDING_FIELDS, architecture
from brnn_core.fileio import read_complete_lines
from brnn_core.runs import index_store
from brnn_core.runs.bands import BandCache
from brnn_core.runs.damage import link_problem, read_or_problem, shape_problems
from brnn_core.runs.notes import NOTES_NAME, RunNotes, read_notes
from brnn_core.runs.rundir import METRIC_COLUMNS, Run, RunError, config_damage, readable_config
from brnn_core.runs.status import RunStatus, effective_status
from brnn_core.series import GroupCurve
from brnn_core.states import ACTIVE_STATES

FILES = ("config.json", "status.json", "metrics.csv", NOTES_NAME)
Signature = tuple[tuple[int, int, int] | None, ...]  # (mtime_ns, size, inode) of FILES, None for a missing file
STORE_EVERY_S = 10.0  # the store is rewritten at most this often (a sweep's trials end one after another)
SETTLE_NS = 1_000_000_000  # file times move in clock ticks (ms): a folder changed this recently is checked fully


SUMMARY_COLUMNS = ["run_id", "state", "dataset", "cell", "bidirectional", "hidden", "layers", "head", "batch", "lr",
                   "optimizer",
                   "epochs", "step", "best_val_acc", "test_acc", "duration_s", "device", "parent", "problem",
                   "group", "tags", "note"]


@dataclass(frozen=True)
class CheckpointChoice:
    """A saved checkpoint a user can pick: which run, best or last, and how good it was."""

    run_id: str
    kind: str  # "best" (lowest validation loss) or "last"
    path: Path
    val_acc: float | None  # validation accuracy when it was saved (None before the first epoch ended)


@dataclass
class ValSummary:
    """What the tables and pickers need from metrics.csv (its val and test rows)."""

    best_val_acc: float | None = None  # highest validation accuracy
    acc_at_best_loss: float | None = None  # validation accuracy where the validation loss was lowest (best.pt)
    last_val_acc: float | None = None  # the last validation accuracy (last.pt after an epoch)
    test_acc: float | None = None  # the last test row's accuracy
    best_val_loss: float | None = None  # lowest validation loss
    last_val_loss: float | None = None
    val_points: tuple = ()  # (epoch, loss, accuracy) of every validation row: a sweep's curves without a DataFrame


@dataclass
class IndexedRun:
    """What the index read from one run folder, kept until one of its files changes."""

    files: Signature  # of config.json, status.json, metrics.csv when read
    dirs: tuple[int | None, int | None]  # mtime_ns of the run folder and of its checkpoints/ folder
    config: dict
    stored_status: dict
    metrics: ValSummary
    checkpoints: tuple[bool, bool]  # best.pt, last.pt exist
    settled: bool = False  # nothing in it was newer than SETTLE_NS when read: a later change moves a signature

    @property
    def active(self) -> bool:
        return self.stored_status.get("state") in ACTIVE_STATES

    @property
    def is_run(self) -> bool:
        """False for an entry that could not be opened as a run folder (`broken_entry`): a table row, no run."""
        return self.files[0] is not None

    def to_dict(self) -> dict:
        return {"files": self.files, "dirs": self.dirs, "config": self.config, "stored_status": self.stored_status,
                "metrics": asdict(self.metrics), "checkpoints": self.checkpoints}

    @classmethod
    def from_dict(cls, d: dict) -> IndexedRun:
        """An entry saved by `to_dict` (index_store): JSON made its tuples lists."""
        metrics = ValSummary(**{**d["metrics"], "val_points": tuple(map(tuple, d["metrics"]["val_points"]))})
        files = tuple(None if f is None else tuple(f) for f in d["files"])
        return cls(files, tuple(d["dirs"]), dict(d["config"]), dict(d["stored_status"]), metrics,
                   tuple(d["checkpoints"]), settled=True)


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
    points: list[tuple[float, float, float]] = []
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
        out.last_val_loss = None if math.isnan(loss) else loss
        points.append((_number(parts[METRIC_COLUMNS.index("epoch")]), loss, acc))
        if acc_or_none is not None and (out.best_val_acc is None or acc > out.best_val_acc):
            out.best_val_acc = acc
        if loss < best_loss:  # the first lowest, as pandas' idxmin; NaN never compares lower
            best_loss, out.acc_at_best_loss = loss, acc_or_none
            out.best_val_loss = loss
    out.val_points = tuple(points)
    return out


def seed_group(train: dict) -> str:
    """The id shared by runs whose training settings differ only in `seed` (or in what they record, not how they
    train: config.RECORDING_FIELDS, such as TensorBoard files): 8 hex digits of their hash."""
    settings = {k: v for k, v in (train or {}).items() if k != "seed" and k not in RECORDING_FIELDS}
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]


def summary_row(run_id: str, config: dict, status: dict, metrics: ValSummary, now: float | None = None) -> dict:
    """One row of the runs table (SUMMARY_COLUMNS)."""
    tc = config.get("train", {})
    started = status.get("started") or status.get("created")
    active = status.get("state") in ACTIVE_STATES
    ended = status.get("ended") or ((now or time.time()) if active else status.get("updated"))
    return {
        "run_id": run_id, "state": status.get("state"), "dataset": tc.get("dataset"),
        **architecture(tc), "hidden": tc.get("hidden_size"), "layers": tc.get("num_layers"), "head": tc.get("head"),
        "batch": tc.get("batch_size"), "lr": tc.get("lr"), "optimizer": tc.get("optimizer"),
        "epochs": tc.get("epochs"), "step": status.get("step"), "best_val_acc": metrics.best_val_acc,
        "test_acc": metrics.test_acc,
        "duration_s": round(float(ended) - float(started), 1) if started and ended else None,
        "device": config.get("device"),
        "parent": (config.get("parent") or {}).get("run_id"),  # a branch's parent run (branch.py)
        "problem": config.get("_damaged") or status.get("damaged"),  # what is wrong with a damaged run's files
        "group": seed_group(tc),
        "tags": ",".join((config.get("_notes") or {}).get("tags") or []),
        "note": (config.get("_notes") or {}).get("note") or "",  # the user's (runs/notes.py)
    }


def _signature(path: Path) -> Signature:
    out = []
    for name in FILES:
        try:
            st = os.stat(path / name)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))  # a rewrite (rename) is a new inode
        except OSError:
            out.append(None)
    return tuple(out)


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _settled(dirs: tuple, files: Signature) -> bool:
    """True when nothing was written for SETTLE_NS: file times move in clock ticks and a rewrite may reuse the
    inode, so two writes a few ms apart can leave the same signature; what changed that recently is re-read."""
    newest = max([d or 0 for d in dirs] + [f[0] for f in files if f])
    return _now_ns() - newest > SETTLE_NS


_now_ns = time.time_ns  # the clock _settled reads (tests look at the folder "a while later")


def _read_config(path: Path) -> dict:
    """config.json as a listing reads it: what is left of a damaged one, with `_damaged` saying why."""
    if not path.is_file():  # a device or folder in its place (a test's /dev/full) must not be read
        return {}
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        return {"_damaged": f"config.json cannot be read ({exc.strerror or type(exc).__name__})"}
    except ValueError as exc:
        return {"_damaged": f"config.json cannot be read ({type(exc).__name__})"}
    damage = config_damage(data)
    return {**readable_config(data), **({"_damaged": damage} if damage else {})}


def _checkpoints(path: Path) -> tuple[bool, bool]:
    return (path / "checkpoints" / "best.pt").is_file(), (path / "checkpoints" / "last.pt").is_file()


def read_entry(path: Path, files: Signature, dirs: tuple) -> IndexedRun:
    """A run's entry; what is wrong with its files (and a folder linked in from elsewhere) goes into the table's
    problem column through the config's `_damaged` (runs.damage)."""
    problems = shape_problems(path, FILES)
    metrics = path / "metrics.csv"
    lines, _ = read_or_problem(lambda: read_complete_lines(metrics) if metrics.is_file() else ([], 0),  # /dev/full
                               ([], 0), "metrics.csv", problems)  # would never end
    status = path / "status.json"  # through the status schema: a damaged one reads as damaged, with its note
    notes = read_or_problem(lambda: read_notes(path), RunNotes(), NOTES_NAME, problems)  # tags and note columns
    config = {**_read_config(path / "config.json"), "_notes": {"tags": list(notes.tags), "note": notes.note}}
    target, linked = link_problem(path)
    if target is not None:
        config["_link"] = target
    problems += [linked] if linked else []
    if problems:
        config["_damaged"] = "; ".join(filter(None, [config.get("_damaged"), *problems]))
    stored = RunStatus.read(status) if status.is_file() else \
        RunStatus.damaged_by("status.json is not a file") if status.exists() else RunStatus()
    return IndexedRun(files, dirs, config, stored.to_dict(), val_summary(lines), _checkpoints(path))


def broken_entry(problem: str) -> IndexedRun:
    """An entry of the runs folder that cannot be read as a run at all (a symlink loop, a link that leads nowhere,
    a folder nobody may open): listed with its problem, no state and no files."""
    return IndexedRun((None,) * len(FILES), (None, None), {"_damaged": problem}, {}, ValSummary(), (False, False))


class RunIndex:
    """The runs in one folder, newest first, with what tables and pickers show; thread-safe.

    Every call rescans the folder (a new or deleted run shows at once). A run that has ended costs two
    `stat` calls: its folder's and its checkpoints/ folder's mtime, which every change to it moves (files
    there are only ever replaced by a rename, and metrics.csv is only appended to by a live worker, whose
    run is active). An active run has its three files checked by mtime, size and inode, and a run
    written within the last second is read again (file times move in clock ticks and a rewrite may
    reuse an inode, so two writes a few ms apart can look alike). Only what changed is read again."""

    def __init__(self, runs_dir: Path | str, store: Path | str | None = None):
        """`store`: a file that keeps the ended runs' entries between server processes (index_store); the
        dashboard passes `runs_dir/.index.json`, a Python user reading runs once passes nothing."""
        self.runs_dir = Path(runs_dir)
        self._lock = threading.Lock()
        self._entries: dict[str, IndexedRun] = {}
        self.reads = 0  # runs (re)read from disk so far: how the tests see the cache work
        self._generation = 0  # goes up whenever a run was added, re-read or removed
        self._memo: dict[str, tuple[int, object]] = {}  # name -> (generation, result) of results built from it
        self._frames = MetricsCache()
        self._bands = BandCache()
        self.store = Path(store) if store is not None else None
        self._stored_generation = 0  # the generation last saved to the store
        self._stored_at = 0.0
        if self.store is not None:
            for name, saved in index_store.load(self.store, self.runs_dir).items():
                try:
                    self._entries[name] = IndexedRun.from_dict(saved)
                except (KeyError, TypeError, ValueError):
                    continue  # read from the run folder instead

    def _current(self, name: str, where: str, dir_mtime: int | None, link: bool = False) -> IndexedRun | None:
        """The run's entry, read again if it changed (None: not a complete run). `where` is its folder as a
        string: this is the per-run cost of every rerun, and pathlib's objects cost more than the stat calls.
        `link`: the entry is a symlink (a run linked in from elsewhere), which its entry must say."""
        entry = self._entries.get(name)
        if entry is not None and ("_link" in entry.config) != link:
            entry = None  # a folder became a link or a link a folder, with the same files: read it again
        dirs = (dir_mtime, _mtime(where + "/checkpoints"))
        if entry is not None and entry.settled and not entry.active and entry.dirs == dirs:
            return entry
        path = Path(where)
        files = _signature(path)
        if files[0] is None:  # no config.json: not a run (yet)
            return None
        if entry is not None and entry.settled and entry.files == files:
            if entry.dirs != dirs:  # a checkpoint or report.json was written: the summary stands
                entry.dirs, entry.checkpoints = dirs, _checkpoints(path)
                entry.settled = _settled(dirs, files)
                self._generation += 1
            return entry
        self.reads += 1
        self._generation += 1
        try:
            entry = read_entry(path, files, dirs)
            entry.settled = _settled(dirs, files)
        except OSError as exc:  # whatever else makes it unreadable is its own problem, never the listing's
            entry = broken_entry(f"cannot be read: {exc.strerror or exc} ({exc.filename or where})")
        self._entries[name] = entry
        return entry

    def _broken(self, name: str, problem: str) -> IndexedRun:
        """The entry of something in the runs folder that cannot be opened as a run folder (a symlink loop)."""
        entry = self._entries.get(name)
        if entry is None or entry.config.get("_damaged") != problem:
            entry = self._entries[name] = broken_entry(problem)
            self._generation += 1
        return entry

    def _scan(self) -> tuple[list[tuple[str, str, int | None, bool]], dict[str, str]]:
        """The run folders in the runs folder (name, path, mtime, is a link), and its entries that cannot be
        followed (name -> why: a symlink loop, a link to nothing)."""
        found: list[tuple[str, str, int | None, bool]] = []
        broken: dict[str, str] = {}
        try:
            with os.scandir(self.runs_dir) as it:
                for e in it:
                    if e.name.startswith("."):
                        continue
                    try:
                        if e.is_dir():
                            found.append((e.name, e.path, e.stat().st_mtime_ns, e.is_symlink()))
                        elif e.is_symlink():
                            broken[e.name] = f"a link to {os.readlink(e.path)}, which does not exist"
                    except FileNotFoundError:  # deleted meanwhile
                        continue
                    except OSError as exc:  # ELOOP, EACCES: this entry's problem, not the folder's
                        broken[e.name] = f"cannot be opened: {exc.strerror or exc}"
        except (FileNotFoundError, NotADirectoryError):
            pass
        return found, broken

    def refresh(self) -> list[tuple[str, IndexedRun]]:
        """(run id, entry) for every complete run, newest first; an entry that cannot be opened as a run folder
        (a symlink loop, a link to nothing) too, with its problem and no state."""
        found, broken = self._scan()
        rows = [(name, (where, mtime, link)) for name, where, mtime, link in found] + list(broken.items())
        out = []
        with self._lock:
            for name, what in sorted(rows, key=lambda row: row[0], reverse=True):
                entry = self._broken(name, what) if isinstance(what, str) else self._current(name, *what)
                if entry is not None:
                    out.append((name, entry))
            gone = set(self._entries) - {name for name, _ in out}
            for name in gone:
                del self._entries[name]
            self._generation += bool(gone)
            self._save_store()
        return out

    def _save_store(self) -> None:
        """Keep the entries on disk when something changed, at most every STORE_EVERY_S (under the lock)."""
        if self.store is None or self._generation == self._stored_generation:
            return
        if time.monotonic() - self._stored_at < STORE_EVERY_S and self._stored_at:
            return
        # a read-only runs folder: every new server reads the runs again, as without a store
        with contextlib.suppress(OSError):
            index_store.save(self.store, self.runs_dir, {n: e.to_dict() for n, e in self._entries.items()
                                                         if e.settled and not e.active})
        self._stored_generation, self._stored_at = self._generation, time.monotonic()

    def _memoised(self, name: str, entries: list[tuple[str, IndexedRun]], build):
        """build(entries), reused while no run changed; never kept while a run is active (its duration grows
        and its worker may die without a file changing)."""
        with self._lock:
            generation = self._generation
            hit = self._memo.get(name)
        if hit is not None and hit[0] == generation:
            return hit[1]
        result = build(entries)
        if not any(e.active for _, e in entries):
            with self._lock:
                self._memo[name] = (generation, result)
        return result

    def statuses(self) -> dict[str, dict]:
        """run id -> its effective status (an active run whose worker is gone reads `interrupted`), newest first."""
        return {name: effective_status(dict(entry.stored_status)) for name, entry in self.refresh() if entry.is_run}

    def table(self) -> pd.DataFrame:
        """The runs table (SUMMARY_COLUMNS), newest first. Shared between callers: do not modify it."""
        def build(entries) -> pd.DataFrame:
            now = time.time()
            rows = [summary_row(name, e.config, effective_status(dict(e.stored_status)), e.metrics, now)
                    for name, e in entries]
            return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)

        return self._memoised("table", self.refresh(), build)

    def entries(self, run_ids: list[str]) -> dict[str, IndexedRun]:
        """The entries of these runs (those that exist), each re-read only when its files changed."""
        wanted = set(run_ids)
        return {name: entry for name, entry in self.refresh() if name in wanted and entry.is_run}

    def metrics(self, run_id: str) -> pd.DataFrame:
        """One run's whole metrics.csv (shared between callers: do not modify it)."""
        return self._frames.metrics(Run(self.runs_dir / run_id))

    def band(self, run_ids: list[str], what: str = "train", smoothing: float = 0.0) -> GroupCurve | None:
        """The mean ± std band of these runs' training ("train", each smoothed first) or validation ("val") loss:
        a seed group's curve on the Runs page. Built once per version of the runs' metrics.csv (runs.bands)."""
        return self._bands.band(self.runs_dir, run_ids, what, smoothing)

    def checkpoint_choices(self) -> list[CheckpointChoice]:
        """Every run's best.pt, then its last.pt; runs by the validation accuracy of the checkpoint each one chose
        (best.pt, else last.pt), highest first.

        The first is the picker's default: a run's own choice, calibrated when the run finished. A last.pt is not
        calibrated, and its accuracy can beat best.pt's when the run chooses by validation loss (the default), so
        ranking every file by accuracy alone made an uncalibrated last.pt the default."""
        def build(entries) -> list[CheckpointChoice]:
            runs = []
            for name, entry in entries:
                ckpt_dir = self.runs_dir / name / "checkpoints"
                by_acc = (entry.config.get("train") or {}).get("best_by") == "val_accuracy"
                best_acc = entry.metrics.best_val_acc if by_acc else entry.metrics.acc_at_best_loss
                saved = [CheckpointChoice(name, kind, ckpt_dir / f"{kind}.pt", acc)
                         for exists, kind, acc in ((entry.checkpoints[0], "best", best_acc),
                                                   (entry.checkpoints[1], "last", entry.metrics.last_val_acc))
                         if exists]
                if saved:
                    runs.append(saved)
            runs.sort(key=lambda saved: saved[0].val_acc if saved[0].val_acc is not None else -1.0, reverse=True)
            return [choice for saved in runs for choice in saved]

        return list(self._memoised("checkpoints", self.refresh(), build))


class MetricsCache:
    """Whole metrics.csv DataFrames of the few runs a page overlays, re-read only when the file changes."""

    def __init__(self, max_runs: int = 16):
        self.max_runs = max_runs
        self._lock = threading.Lock()
        self._frames: dict[Path, tuple[tuple[int, int, int] | None, pd.DataFrame]] = {}

    def metrics(self, run: Run) -> pd.DataFrame:
        try:
            st = os.stat(run.metrics_path)
            sig = (st.st_mtime_ns, st.st_size, st.st_ino)
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


def update_store(runs_dir: Path | str) -> None:
    """Bring the runs folder's index store up to date after a CLI run or a sweep ended, so that the next
    dashboard server starts warm even when no server ran meanwhile (the runs already in it cost two stats)."""
    runs_dir = Path(runs_dir)
    if runs_dir.is_dir():
        RunIndex(runs_dir, store=runs_dir / index_store.STORE_NAME).refresh()


# ---------------------------------------------------------------- read afresh, for Python users
def runs_table(runs_dir: Path) -> pd.DataFrame:
    """Every run's summary row, newest first, read afresh (the pages keep one `RunIndex` instead)."""
    return RunIndex(runs_dir).table()


@dataclass
class RunData:
    """A whole run read into memory for pandas users."""

    run_id: str
    config: dict
    status: dict
    metrics: pd.DataFrame
    events: pd.DataFrame


def read_run(path: Path | str) -> RunData:
    run = Run(Path(path))
    if not run.exists():
        raise RunError(f"{path}: not a run directory (no config.json)")
    return RunData(run.id, run.config(), run.status(), run.metrics(), pd.DataFrame(run.events()))
