"""CPU threads for training: how many each process uses (docs/decisions/007-cpu-threads.md).

Every core by default, minus the cores other brnn_core training processes hold and the cores other programs keep
busy: each process leaves a claim (a small file under the temp folder) and re-plans every few seconds, so runs
started one after another share the cores. An explicit `cpu_threads` or OMP_NUM_THREADS is always kept; torch's
inter-op pool and libgomp's wait policy are left alone (the record says why). `plan_threads` is the policy as a
pure function; `CpuClaims` is the bookkeeping around it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

REPLAN_EVERY_S = 5.0
FOREIGN_CORE = 0.6  # other programs using this much of a core take it (docs/decisions/007-cpu-threads.md)
FIRST_SAMPLE_S = 0.25  # how long the first plan watches the machine before training starts


@dataclass(frozen=True)
class Claim:
    """What another training process on this machine holds."""

    threads: int
    auto: bool  # planned by this policy (it shrinks and grows) rather than fixed by cpu_threads/OMP_NUM_THREADS


@dataclass(frozen=True)
class ThreadPlan:
    threads: int | None  # None: leave torch's setting (OMP_NUM_THREADS decides)
    auto: bool
    why: str


def plan_threads(requested: int, *, cores: int, others: list[Claim], env: Mapping[str, str],
                 busy: float = 0.0) -> ThreadPlan:
    """Threads for one training process: `requested` if above 0, OMP_NUM_THREADS if set, else a fair share.

    The share: the cores neither held by fixed claims nor taken by other programs, divided evenly between
    this process and the other auto-planned ones (which re-plan the same way), at least one. `busy` is the
    CPU (in cores) everything but this process used lately; what the other claims do not explain is other
    programs', and a core counts as taken once they use FOREIGN_CORE of it (a team of OpenMP threads waits
    for its slowest member: one thread that shares a core with someone else slows them all)."""
    if requested > 0:
        return ThreadPlan(requested, False, f"cpu_threads={requested}")
    if env.get("OMP_NUM_THREADS"):
        return ThreadPlan(None, False, f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']}")
    fixed = sum(c.threads for c in others if not c.auto)
    sharers = 1 + sum(1 for c in others if c.auto)
    foreign = max(0.0, busy - sum(c.threads for c in others))
    taken = min(cores, int(foreign + 1 - FOREIGN_CORE))
    share = max(1, (cores - fixed - taken) // sharers)
    why = f"{share} of {cores} cores" + (f", shared with {len(others)} other training process(es)" if others else "") \
        + (f", {taken} busy with other programs" if taken else "")
    return ThreadPlan(share, True, why)


class CpuLoad:
    """CPU time everything but this process used since the last call, in cores (Linux, macOS, Windows)."""

    def __init__(self):
        self._me = psutil.Process()
        self._last = self._sample()

    def _sample(self) -> tuple[float, float, float]:
        t = psutil.cpu_times()
        busy = sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))  # not idle/iowait/steal
        mine = self._me.cpu_times()
        return busy, mine.user + mine.system, time.monotonic()

    def others_cores(self, at_least_s: float = 0.0) -> float:
        """Cores the rest of the machine kept busy since the previous call (waiting `at_least_s` if needed)."""
        wait = at_least_s - (time.monotonic() - self._last[2])
        if wait > 0:
            time.sleep(wait)
        now = self._sample()
        busy, mine, wall = (a - b for a, b in zip(now, self._last, strict=True))
        self._last = now
        return max(0.0, busy - mine) / max(wall, 1e-3)


def claims_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"brnn-cpu-claims-{uid}"


class CpuClaims:
    """This process's claim on the CPU and the others' (one JSON file per training process, by pid).

    A claim whose process is gone (or whose pid was reused) is ignored and removed."""

    def __init__(self, requested: int, *, folder: Path | None = None, env: Mapping[str, str] = os.environ,
                 cores: int | None = None, busy: Callable[[float], float] | None = None):
        self.requested, self.env = requested, env
        self.cores = cores or os.cpu_count() or 1
        self.folder = folder or claims_dir()
        self.path = self.folder / str(os.getpid())
        self.plan: ThreadPlan | None = None
        self.planned_at = 0.0
        self._busy = busy  # (at_least_s) -> cores the rest of the machine used lately; default: a CpuLoad

    def others(self) -> list[Claim]:
        out = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.folder):
                if entry.name == self.path.name or not entry.name.isdigit():
                    continue
                try:
                    data = json.loads(Path(entry.path).read_text())
                    alive = abs(psutil.Process(int(entry.name)).create_time() - data["started"]) < 1.0
                except (OSError, ValueError, KeyError, psutil.Error):
                    alive = False
                if alive:
                    out.append(Claim(int(data["threads"]), bool(data["auto"])))
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        return out

    def replan(self, *, force: bool = False) -> ThreadPlan:
        """Plan again (at most every REPLAN_EVERY_S unless forced), record the claim, and return the plan."""
        if self.plan is not None and not force and time.monotonic() - self.planned_at < REPLAN_EVERY_S:
            return self.plan
        fixed = self.requested > 0 or bool(self.env.get("OMP_NUM_THREADS"))
        if self._busy is None and not fixed:
            self._busy = CpuLoad().others_cores
        busy = 0.0 if fixed else self._busy(FIRST_SAMPLE_S if self.plan is None else 0.0)
        self.planned_at = time.monotonic()
        plan = plan_threads(self.requested, cores=self.cores, others=self.others(), env=self.env, busy=busy)
        if plan != self.plan:
            self.plan = plan
            self._write(plan)
        return plan

    def _write(self, plan: ThreadPlan) -> None:
        threads = plan.threads or int(self.env.get("OMP_NUM_THREADS") or 1)
        blob = json.dumps({"threads": threads, "auto": plan.auto, "started": psutil.Process().create_time()})
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(blob)
            os.replace(tmp, self.path)


def release_claim(folder: Path | None = None) -> None:
    """Drop this process's claim (a run ended; the process may train another or do something else)."""
    with contextlib.suppress(OSError):
        ((folder or claims_dir()) / str(os.getpid())).unlink()


class ThreadKeeper:
    """Sets torch's thread count from the plan now, and again whenever a re-plan changes it (between steps)."""

    def __init__(self, requested: int, claims: CpuClaims | None = None, on_change=None):
        self.claims = claims or CpuClaims(requested)
        self.on_change = on_change  # (step, plan) after a re-plan changed the thread count
        self.apply(force=True)

    def apply(self, *, step: int | None = None, force: bool = False) -> ThreadPlan:
        plan = self.claims.replan(force=force)
        if plan.threads and plan.threads != torch.get_num_threads():
            torch.set_num_threads(plan.threads)
            if step is not None and self.on_change is not None:
                self.on_change(step, plan)
        return plan

    def wrap(self, before_step):
        """A FitHooks.before_step that re-plans (at most every REPLAN_EVERY_S) before calling `before_step`."""
        def hook(step: int) -> bool:
            self.apply(step=step)
            return before_step(step) if before_step is not None else True

        return hook


def cpu_threads(requested: int) -> int | None:
    """Threads a CPU training process starts with on an otherwise idle machine: `requested`, or every core;
    None keeps an explicit OMP_NUM_THREADS (the policy, and how it shares with other runs: threads.py)."""
    return plan_threads(requested, cores=os.cpu_count() or 1, others=[], env=os.environ).threads
