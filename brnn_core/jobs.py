"""Background training, the dashboard's side: start worker processes and keep track of them.

The dashboard never trains in its own process: a crash must not take the UI down and GPU
memory must be freed when a run ends. `start_worker` creates the run directory and spawns
`python -m brnn_core train --run-dir DIR`; the page then steers it through the control channel
(`Run.send_command`, format and worker side in control.py) and reads the run directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from .config import TrainConfig
from .runs import Run, RunError, create_run, list_runs
from .states import ACTIVE_STATES, State


def worker_command(run_dir: Path, *, resume: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "brnn_core", "train", "--run-dir", str(run_dir)]
    return cmd + ["--resume", str(run_dir)] if resume else cmd


def worker_environ(base: dict[str, str], data_dir: Path | None = None) -> dict[str, str]:
    """The worker process's environment: `base` (the server's), the data folder and plain progress lines."""
    env = dict(base)
    if data_dir is not None:
        env["BRNN_DATA_DIR"] = str(data_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("BRNN_PROGRESS", "plain")
    return env


def spawn_worker(run: Run, *, data_dir: Path | None = None, resume: bool = False) -> subprocess.Popen:
    """Start the worker for an existing run directory; its output goes to worker.log."""
    env = worker_environ(os.environ, data_dir)
    with open(run.path / "worker.log", "ab") as log:
        proc = subprocess.Popen(worker_command(run.path, resume=resume), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                cwd=str(Path(__file__).resolve().parent.parent))
    import psutil

    try:
        started = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        started = None
    run.write_status(pid=proc.pid, pid_started=started, message="starting the worker")
    return proc


def start_worker(runs_dir: Path, cfg: TrainConfig, *, data_dir: Path | None = None) -> tuple[Run, subprocess.Popen]:
    """Validate, create the run directory, spawn the worker; returns at once."""
    cfg.validate()
    run = create_run(runs_dir, new_run_config(cfg, data_dir))
    return run, spawn_worker(run, data_dir=data_dir)


def new_run_config(cfg: TrainConfig, data_dir: Path | None) -> dict:
    from . import __version__

    return {"train": cfg.to_dict(), "dataset": cfg.dataset,
            "data_dir": str(Path(data_dir).resolve()) if data_dir else None,
            "versions": {"brnn_core": __version__, "torch": torch.__version__, "python": sys.version.split()[0]},
            "created": time.time()}


def active_runs(runs_dir: Path) -> list[Run]:
    """Runs whose worker is alive and not finished (queued, loading, running, paused, stopping)."""
    return [r for r in list_runs(runs_dir) if r.status().get("state") in ACTIVE_STATES]


class JobRegistry:
    """Processes this server started, by run id: only to reap them; disk is the truth.

    Shared by every browser session through `st.cache_resource`, hence the lock.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen] = {}

    def _refuse_if_busy(self, runs_dir: Path, doing: str) -> None:
        """One run trains at a time: raise naming the active one (call with the lock held)."""
        self.reap()
        busy = active_runs(runs_dir)
        if busy:
            raise RunError(f"run {busy[0].id} is still {busy[0].status()['state']}; "
                           f"stop it (or wait for it) before {doing}")

    def start(self, runs_dir: Path, cfg: TrainConfig, *, data_dir: Path | None = None) -> Run:
        """Start a run unless one is already training: two quick clicks start exactly one."""
        with self._lock:
            self._refuse_if_busy(runs_dir, "starting another")
            run, proc = start_worker(runs_dir, cfg, data_dir=data_dir)
            self._procs[run.id] = proc
            return run

    def branch(self, runs_dir: Path, parent_ref: str, kind: str = "last", overrides: dict | None = None, *,
               data_dir: Path | None = None) -> Run:
        """Create a branch of `parent_ref` (branch.create_branch) and start it, under the same one-run rule."""
        from .branch import create_branch

        with self._lock:
            self._refuse_if_busy(runs_dir, "starting a branch")
            run = create_branch(runs_dir, parent_ref, kind, overrides, data_dir=data_dir)
            self._procs[run.id] = spawn_worker(run, data_dir=data_dir)
            return run

    def resume(self, run: Run, *, data_dir: Path | None = None) -> None:
        with self._lock:
            self._refuse_if_busy(run.path.parent, "resuming another")
            run.write_status(state=State.QUEUED, message="resuming", pid=None, created=time.time())
            self._procs[run.id] = spawn_worker(run, data_dir=data_dir, resume=True)

    def reap(self) -> None:
        """Collect exit codes of finished workers so no zombies pile up."""
        for run_id, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[run_id]

    def running_ids(self) -> list[str]:
        with self._lock:
            self.reap()
            return list(self._procs)
