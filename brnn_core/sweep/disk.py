"""Disk use of a sweep: a 500-trial sweep must not keep 500 copies of the optimizer state.

Every trial keeps best.pt (weights only). last.pt (weights + optimizer state) stays only where it is still
useful: trials that can be resumed, trials still training, and the best `keep_best` by the sweep's metric.
What is removed is written down in the run (an event, `pruned` in status.json, a line in its message), so the
pages say the file is gone instead of offering it. Tune's own checkpoint copies (PBT) go when the sweep ends.
"""

from __future__ import annotations

import shutil

from brnn_core.fileio import inside
from brnn_core.runs.retention import delete_checkpoints, size_text
from brnn_core.runs.rundir import Run, write_problem
from brnn_core.states import State
from brnn_core.sweep.records import SCHEDULER_STOPS, Sweep, ranked
from brnn_core.text import plural


def prunable(status: dict) -> bool:
    """Ended for good: finished, failed, diverged, or stopped early by the scheduler."""
    state = status.get("state")
    return state in (State.FINISHED, State.FAILED, State.DIVERGED) or (
        state == State.STOPPED and status.get("stopped_by") in SCHEDULER_STOPS)


def prune_sweep(sweep: Sweep, keep_best: int, ranking: list[str] | None = None) -> list[str]:
    """Remove last.pt from the trials that no longer need it; returns their run ids. `ranking` (run ids, best
    first: the driver's Leaderboard) saves reading every trial's metrics to rank them."""
    info = sweep.raw()
    metric = info.get("metric", "val_loss")
    runs = sweep.trial_runs()
    if ranking is None:
        ranking = [run.id for run, _ in ranked(runs, metric)]
    keep = set(ranking[:max(keep_best, 0)])
    removed, total = [], 0
    for run in runs:
        if run.id in keep or not run.last_ckpt.is_file() or write_problem(run.path):  # never through a link
            continue
        status = run.status()
        if prunable(status):
            total += prune_last(run, status, f"not among the best {keep_best} trials by {metric}")
            removed.append(run.id)
    if removed:
        before = info.get("pruned") or {}
        pruned = {"last.pt": int(before.get("last.pt", 0)) + len(removed),
                  "bytes": int(before.get("bytes", 0)) + total}
        sweep.write(pruned={**before, **pruned})
        sweep.log_event("pruned", f"removed last.pt of {plural(len(removed), 'trial')}, {size_text(total)}",
                        runs=removed)
    return removed


def prune_last(run: Run, status: dict, why: str) -> int:
    """Remove one trial's last.pt (and the files that belong to it) the way `runs prune` does; bytes freed."""
    return delete_checkpoints(run, ["last.pt"], why, by="sweep", status=status)


def prune_tune_checkpoints(sweep: Sweep) -> int:
    """Remove Tune's checkpoint copies (PBT's) once the sweep is over; returns the bytes freed."""
    freed = 0
    if not sweep.tune_dir.is_dir():
        return 0
    for folder in sweep.tune_dir.glob("*/checkpoint_*"):
        if folder.is_dir() and inside(folder, sweep.path):  # a tune/ that links elsewhere is not ours to empty
            freed += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            shutil.rmtree(folder, ignore_errors=True)
    if freed:
        before = sweep.raw().get("pruned") or {}
        sweep.write(pruned={**before, "tune_checkpoints_bytes": int(before.get("tune_checkpoints_bytes", 0)) + freed})
        sweep.log_event("pruned", f"removed Tune's checkpoint copies, {size_text(freed)}")
    return freed
