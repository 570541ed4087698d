"""Checkpoint retention: free disk by deleting the model files of ended runs outside the best K, keeping records.

`plan_prune` ranks the selected runs (per seed group, per sweep or all together) by a validation metric and
lists what would go and how much it frees; `apply_prune` deletes exactly that, each run under its worker lock,
and writes it down (status.json `pruned`, a `pruned` event, a line in its message) so pages and the CLI say why
a checkpoint is gone. An active, queued or locked run is never touched. `delete_checkpoints` is the one deletion
(sweep/disk.py uses it for its trials' last.pt); `RunSizes` gives each run's size on disk, cached by mtimes.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from brnn_core.locks import LockError
from brnn_core.runs import lifecycle, worker_lock
from brnn_core.runs.index import IndexedRun, RunIndex, seed_group
from brnn_core.runs.rundir import Run, RunError, check_writable, write_problem
from brnn_core.runs.status import effective_status
from brnn_core.states import ENDED_STATES

# --by: the name, the ValSummary field it reads (metrics.csv's validation rows) and which way is better
METRICS = {"val_loss": ("best_val_loss", "min"), "val_accuracy": ("best_val_acc", "max"),
           "last_val_loss": ("last_val_loss", "min"), "last_val_accuracy": ("last_val_acc", "max")}
PER = ("group", "sweep", "all")  # what the best K are counted in (docs/cli.md, "Freeing disk")
DEFAULT_PER = "group"
MODEL_FILE = re.compile(r".+\.(pt|pth|ckpt)")
# `<checkpoint>.<more>` belongs to that checkpoint (the Inside page's states, drawing scores), and so does
# `.<checkpoint>.<random>.tmp`, a save a killed worker never renamed (fileio.atomic_write)
SIDE_FILE = re.compile(r"\.?(.+?\.(?:pt|pth|ckpt))\..+")


class PruneError(RunError):
    """A prune that cannot be planned; the message names the fix."""


def size_text(size: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


# ---------------------------------------------------------------- which files belong to which checkpoint
def checkpoint_files(run: Run) -> dict[str, list[Path]]:
    """checkpoint name -> its files in checkpoints/: the model file, then the files that belong to it. A side
    file whose checkpoint is already gone is listed under that name too."""
    try:
        names = sorted(os.listdir(run.checkpoint_dir))
    except OSError:
        return {}
    out: dict[str, list[Path]] = {n: [run.checkpoint_dir / n] for n in names if MODEL_FILE.fullmatch(n)}
    for name in names:
        side = SIDE_FILE.fullmatch(name)
        if name not in out and side:
            out.setdefault(side.group(1), []).append(run.checkpoint_dir / name)
    return out


def freed_bytes(paths: list[Path]) -> dict[Path, int]:
    """path -> the bytes deleting all of `paths` frees through it: a hard-linked file (a branch's parent.pt is
    one) frees its size once, and only when every link to it is among `paths`."""
    seen: dict[tuple[int, int], list] = {}
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        seen.setdefault((st.st_dev, st.st_ino), [st.st_nlink, st.st_size, []])[2].append(path)
    out = {}
    for nlink, size, links in seen.values():
        for k, path in enumerate(links):
            out[path] = size if k == 0 and len(links) >= nlink else 0
    return out


# ---------------------------------------------------------------- deleting and recording
def pruned_note(names: list[str]) -> str:
    note = f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} removed to save disk"
    if "last.pt" in names:
        note += ", so this run cannot be resumed"
    return note + " (its records are kept)"


def delete_checkpoints(run: Run, names: list[str], why: str, *, by: str, status: Mapping | None = None) -> int:
    """Delete these checkpoints of `run` (and the files that belong to them) and record it: an event, `pruned`
    in status.json (name -> time, bytes, why, by, files) and a line in its message. Returns the bytes freed.
    RunError for a run whose folder or checkpoints/ leads out of its runs folder: nothing is deleted through it."""
    check_writable(run.path)
    files = checkpoint_files(run)
    names = [n for n in names if n in files]
    if not names:
        return 0
    paths = [p for n in names for p in files[n]]
    freed = freed_bytes(paths)
    status = run.stored_status() if status is None else status
    records, now = {}, time.time()
    for name in names:
        for path in files[name]:
            path.unlink(missing_ok=True)
        records[name] = {"time": now, "bytes": sum(freed.get(p, 0) for p in files[name]), "why": why, "by": by,
                         "files": [p.name for p in files[name]]}
    total = sum(freed.values())
    note = pruned_note(names)
    run.log_event("pruned", f"{note} ({size_text(total)}; {why})", files=[p.name for p in paths], bytes=total,
                  step=status.get("step"), by=by)
    message = status.get("message") or ""
    lifecycle.checkpoints_pruned(run, records, f"{message} · {note}" if message else note)
    return total


def pruned_reason(run: Run, kinds: str | tuple[str, ...], status: Mapping | None = None) -> str | None:
    """Why these checkpoints (last | best) of `run` are missing, for those a prune removed (None: none was)."""
    status = run.stored_status() if status is None else status
    pruned = status.get("pruned") if isinstance(status.get("pruned"), dict) else {}
    names = [f"{k}.pt" for k in ((kinds,) if isinstance(kinds, str) else kinds)]
    names = [n for n in names if pruned.get(n) and not (run.checkpoint_dir / n).is_file()]
    if not names:
        return None
    record = pruned[names[0]] if isinstance(pruned[names[0]], dict) else {}
    stamp = record.get("time")
    when = [time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))] if isinstance(stamp, (int, float)) and stamp else []
    by = {"runs prune": " by `runs prune`", "sweep": " by its sweep"}.get(record.get("by"), "")
    details = "; ".join(when + ([str(record["why"])] if record.get("why") else []))
    were = "was" if len(names) == 1 else "were"
    return (f"run {run.id}'s {' and '.join(names)} {were} pruned{by} to save disk"
            + (f" ({details})" if details else ""))


def resume_problem(run: Run, status: Mapping | None = None) -> str | None:
    """Why `run` cannot be resumed because its last.pt was pruned (a resume would start again from step 0)."""
    reason = pruned_reason(run, "last", status)
    if reason is None:
        return None
    other = (f"branch from its best.pt instead: python -m brnn_core train --from {run.id}:best"
             if run.best_ckpt.is_file() else "no checkpoint of it is left; its records (config, metrics, report) are")
    return f"{reason}, so it cannot be resumed (it would start again from step 0); {other}"


# ---------------------------------------------------------------- planning a prune
@dataclass(frozen=True)
class PruneItem:
    """One run whose checkpoints go."""

    run_id: str
    names: tuple[str, ...]  # checkpoint names in checkpoints/ (best.pt, last.pt, parent.pt, ...)
    files: tuple[str, ...]  # every file deleted with them
    frees: int  # bytes
    value: float | None  # its --by metric
    rank: int  # 1 = best of its unit
    unit: str  # the group, sweep or "all" it was ranked in


@dataclass
class PrunePlan:
    runs_dir: Path
    keep_best: int
    metric: str
    per: str
    items: list[PruneItem] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # ended runs among the best K of their unit
    untouched: dict[str, str] = field(default_factory=dict)  # run id -> why (active, queued, locked)

    @property
    def total(self) -> int:
        return sum(item.frees for item in self.items)

    def why(self, item: PruneItem) -> str:
        where = {"group": f"seed group {item.unit}", "sweep": f"sweep {item.unit}", "all": "the selection"}[self.per]
        return f"not among the best {self.keep_best} of {where} by {self.metric} (rank {item.rank})"

    def lines(self, done: Mapping[str, int] | None = None) -> list[str]:
        """What it frees (`done`: what `apply_prune` freed), per run and in total: what the CLI prints."""
        out = []
        for item in self.items:
            skipped = done is not None and item.run_id not in done
            frees = item.frees if done is None or skipped else done[item.run_id]
            out.append(f"{item.run_id}  {size_text(frees):>9}  {', '.join(item.names)}  ({self.metric} "
                       f"{_value_text(item.value)}, rank {item.rank} in {item.unit})"
                       + ("  skipped: it was resumed or locked meanwhile" if skipped else ""))
        out += [f"untouched: {rid} ({why})" for rid, why in self.untouched.items()]
        count, total = (len(self.items), self.total) if done is None else (len(done), sum(done.values()))
        out.append(f"{'frees' if done is None else 'freed'} {size_text(total)} from {count} run(s), keeping the best "
                   f"{self.keep_best} per {self.per} by {self.metric} ({len(self.kept)} run(s) kept whole)")
        return out


def _value_text(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def check_request(keep_best: int, metric: str, per: str) -> None:
    if keep_best < 1:
        raise PruneError(f"--keep-best {keep_best}: a prune that would leave nothing; keep at least 1 "
                         "(delete whole runs on the Runs page instead)")
    if metric.startswith("test"):
        raise PruneError(f"--by {metric}: choosing checkpoints on the test set makes its score optimistic; rank by "
                         f"a validation metric: {', '.join(METRICS)}")
    if metric not in METRICS:
        raise PruneError(f"--by {metric}: unknown metric; use one of {', '.join(METRICS)}")
    if per not in PER:
        raise PruneError(f"--per {per}: use one of {', '.join(PER)}")


def _unit(per: str, run_id: str, entry: IndexedRun) -> str:
    if per == "group":
        return seed_group(entry.config.get("train") or {})
    if per == "sweep":  # a run outside a sweep is ranked alone, so it is kept
        return str(entry.config.get("sweep_id") or run_id)
    return "all"


def _score(entry: IndexedRun, metric: str) -> float | None:
    value = getattr(entry.metrics, METRICS[metric][0])
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def plan_prune(runs_dir: Path, run_ids: list[str], keep_best: int, metric: str = "val_loss",
               per: str = DEFAULT_PER, index: RunIndex | None = None) -> PrunePlan:
    """What pruning `run_ids` to the best `keep_best` would delete; nothing is changed."""
    check_request(keep_best, metric, per)
    if not run_ids:
        raise PruneError("no run selected: check the filter (python -m brnn_core runs list --filter ...)")
    runs_dir = Path(runs_dir)
    entries = (index or RunIndex(runs_dir)).entries(list(run_ids))
    plan = PrunePlan(runs_dir, keep_best, metric, per)
    units: dict[str, list[tuple[str, float | None]]] = {}
    paths: dict[str, list[Path]] = {}  # run id -> the files its item deletes
    for rid, entry in entries.items():
        state = effective_status(dict(entry.stored_status)).get("state")
        linked = write_problem(runs_dir / rid)
        busy = linked or (str(state) if state not in ENDED_STATES else lock_holder(runs_dir / rid))
        if busy:  # a link to a run elsewhere is never pruned through it
            plan.untouched[rid] = busy
        else:
            units.setdefault(_unit(per, rid, entry), []).append((rid, _score(entry, metric)))
    sign = 1.0 if METRICS[metric][1] == "min" else -1.0
    for unit, scored in units.items():
        # best first; a run without the metric (it never validated) ranks last; ties: the older run first
        scored.sort(key=lambda rv: (rv[1] is None, sign * (rv[1] or 0.0), rv[0]))
        for rank, (rid, value) in enumerate(scored, start=1):
            if rank <= keep_best:
                plan.kept.append(rid)
                continue
            files = checkpoint_files(Run(runs_dir / rid))
            if files:
                paths[rid] = [p for ps in files.values() for p in ps]
                plan.items.append(PruneItem(rid, tuple(files), tuple(p.name for p in paths[rid]), 0, value, rank, unit))
    # what the whole prune frees, hard links between the runs counted once
    freed = freed_bytes([p for ps in paths.values() for p in ps])
    plan.items = [replace(i, frees=sum(freed.get(p, 0) for p in paths[i.run_id])) for i in plan.items]
    return plan


def lock_holder(run_path: Path) -> str | None:
    """Why an ended run's files must not be touched now: a live process holds its worker lock, or no lock can be
    taken there (its folder leads out of the runs folder, or its lock file is damaged); None: they may."""
    try:
        return "a live process holds its worker lock" if worker_lock.held(run_path) else None
    except LockError as exc:
        return str(exc)


def apply_prune(plan: PrunePlan) -> list[tuple[str, int]]:
    """Delete what `plan` lists: each run under its worker lock and only while it is still ended (it may have
    been resumed since the plan was made). Returns (run id, bytes freed) of the runs pruned."""
    done = []
    for item in plan.items:
        run = Run(plan.runs_dir / item.run_id)
        try:
            with worker_lock.hold(run.path):
                status = run.stored_status()
                if effective_status(dict(status)).get("state") not in ENDED_STATES:
                    continue
                done.append((item.run_id, delete_checkpoints(run, list(item.names), plan.why(item),
                                                             by="runs prune", status=status)))
        except (worker_lock.RunBusy, RunError, LockError):  # resumed meanwhile, or its folder became a link
            continue
    return done


# ---------------------------------------------------------------- sizes on disk
class RunSizes:
    """Each run's size on disk, re-walked only when its folder or checkpoints/ folder changes (every file
    there is replaced by a rename, which moves them; an active run is walked each time). Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple, dict[tuple[int, int], int]]] = {}  # path -> (key, inode -> size)

    def _files(self, path: str, active: bool) -> dict[tuple[int, int], int]:
        try:
            key = (os.stat(path).st_mtime_ns, os.stat(path + "/checkpoints").st_mtime_ns)
        except OSError:
            key = None
        with self._lock:
            hit = self._cache.get(path)
        if hit is not None and hit[0] == key and key is not None and not active:
            return hit[1]
        files: dict[tuple[int, int], int] = {}
        for root, _, names in os.walk(path):
            for name in names:
                try:
                    st = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                files[(st.st_dev, st.st_ino)] = st.st_size
        with self._lock:
            self._cache[path] = (key, files)
        return files

    def sizes(self, runs_dir: Path, run_ids: list[str], active: set[str] = frozenset()) -> dict[str, int]:
        """run id -> bytes of its folder (a file hard-linked twice inside it counted once)."""
        return {rid: sum(self._files(str(Path(runs_dir) / rid), rid in active).values()) for rid in run_ids}

    def total(self, runs_dir: Path, run_ids: list[str], active: set[str] = frozenset()) -> int:
        """Bytes of these runs together: a branch's parent.pt linked to its parent's checkpoint counts once."""
        seen: dict[tuple[int, int], int] = {}
        for rid in run_ids:
            seen.update(self._files(str(Path(runs_dir) / rid), rid in active))
        return sum(seen.values())
