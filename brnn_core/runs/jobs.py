"""Background jobs, the dashboard's side: start training workers (and sweep drivers) and keep track of them.

The dashboard never trains in its own process: a crash must not take the UI down and GPU
memory must be freed when a run ends. `start_worker` creates the run directory and spawns the worker,
`python -m brnn_core.training.worker DIR`; the page then steers it through the control channel
(`Run.send_command`, runs.protocol) and reads the run directory. `spawn` is how every background process
starts (workers here, sweep drivers in sweep.launch). `JobRegistry` is the one place the dashboard starts
anything, runs and sweeps alike: a run started while others train waits its turn (runs.queue).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

from brnn_core.config import TrainConfig
from brnn_core.runs import lifecycle, worker_lock
from brnn_core.runs.branch import create_branch
from brnn_core.runs.retention import resume_problem
from brnn_core.runs.rundir import Run, RunError, create_run, list_runs, new_run_config
from brnn_core.runs.seeds import seed_configs
from brnn_core.states import ACTIVE_STATES

WORKER_MODULE = "brnn_core.training.worker"


def worker_command(run_dir: Path, *, resume: bool = False) -> list[str]:
    """The worker's argument list (never a shell line: a run directory is one argument, whatever it holds)."""
    return [sys.executable, "-m", WORKER_MODULE, str(run_dir), *(["--resume"] if resume else [])]


def worker_environ(base: dict[str, str], data_dir: Path | None = None) -> dict[str, str]:
    """The worker process's environment: `base` (the server's), the data folder and plain progress lines."""
    env = dict(base)
    if data_dir is not None:
        env["BRNN_DATA_DIR"] = str(data_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("BRNN_PROGRESS", "plain")
    return env


def spawn(cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start a background process in a session of its own (a page's rerun or Ctrl-C never reaches it), its
    output appended to `log_path`."""
    with open(log_path, "ab") as log:
        # in the caller's folder, importing the same brnn_core as the caller
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=with_this_checkout(env), start_new_session=True, cwd=None)


def with_this_checkout(env: dict[str, str]) -> dict[str, str]:
    """`env`, plus the checkout this brnn_core runs from on PYTHONPATH when it is not installed: a dashboard
    started from another folder (`streamlit run /path/to/streamlit_app.py`) still finds it in its workers."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():  # installed: the child imports it as the caller does
        return env
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return env if str(root) in paths else {**env, "PYTHONPATH": os.pathsep.join([str(root), *paths])}


def spawn_worker(run: Run, *, data_dir: Path | None = None, resume: bool = False) -> subprocess.Popen:
    """Start the worker for an existing run directory; its output goes to worker.log."""
    proc = spawn(worker_command(run.path, resume=resume), run.path / "worker.log", worker_environ(os.environ, data_dir))
    try:
        started = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        started = None
    lifecycle.spawned(run, proc.pid, started)  # a worker that dies before its first word reads as interrupted
    return proc


def start_worker(runs_dir: Path, cfg: TrainConfig, *, data_dir: Path | None = None) -> tuple[Run, subprocess.Popen]:
    """Validate, create the run directory, spawn the worker; returns at once."""
    cfg.validate()
    run = create_run(runs_dir, new_run_config(cfg, data_dir))
    return run, spawn_worker(run, data_dir=data_dir)


def active_runs(runs_dir: Path) -> list[Run]:
    """Runs whose worker is alive and not finished (queued, loading, running, paused, stopping)."""
    return [r for r in list_runs(runs_dir) if r.status().get("state") in ACTIVE_STATES]


class DuplicateRun(RunError):
    """A start of exactly the settings (seed included) of a run that is still queued or training."""

    def __init__(self, message: str, run_id: str):
        super().__init__(message)
        self.run_id = run_id


class JobRegistry:
    """Every background job this server started, training workers and sweep drivers, in one place.

    A run is always started: its worker waits in the queue (runs.queue) while its device is busy. A sweep takes
    the whole machine, so `launch` refuses one, under one lock, while a run is active on disk (queued ones too),
    while a sweep driver started here is alive, or while `also_busy` names something (the sweep layer passes
    its check for sweeps started from the command line). A start of exactly the settings of an active run is
    refused: the same seed trains the same run, so it is a second click, not a second experiment. The
    processes are kept only to reap them and to show a sweep driver that has not written its sweep.json yet;
    disk is the truth. Shared by every browser session through `st.cache_resource`, hence the lock.
    """

    def __init__(self, also_busy: Callable[[Path], str | None] | None = None):
        self._lock = threading.RLock()
        self._procs: dict[str, tuple[str, subprocess.Popen]] = {}  # id -> (kind: run | sweep, process)
        self._also_busy = also_busy

    def launch(self, runs_dir: Path, kind: str, doing: str, spawn: Callable[[], tuple[str, subprocess.Popen]]) -> str:
        """`spawn()` and keep its (id, process); returns the id. A sweep is refused while anything trains."""
        with self._lock:
            self.reap()
            problem = self._busy(runs_dir) if kind == "sweep" else None
            if problem:
                raise RunError(f"{problem}; stop it (or wait for it) before {doing}")
            job_id, proc = spawn()
            self._procs[job_id] = (kind, proc)
            return job_id

    def _busy(self, runs_dir: Path) -> str | None:
        sweeps = [job_id for job_id, (kind, _) in self._procs.items() if kind == "sweep"]
        if sweeps:
            return f"sweep {sweeps[0]} is still running"
        busy = active_runs(runs_dir)
        if busy:
            return f"run {busy[0].id} is still {busy[0].status()['state']}"
        return self._also_busy(runs_dir) if self._also_busy else None

    def start(self, runs_dir: Path, cfg: TrainConfig, *, data_dir: Path | None = None) -> Run:
        """Start a run (queued behind what trains); two quick clicks start exactly one (DuplicateRun)."""
        return self.start_seeds(runs_dir, cfg, [cfg.seed], data_dir=data_dir)[0]

    def start_seeds(self, runs_dir: Path, cfg: TrainConfig, seeds: list[int], *,
                    data_dir: Path | None = None) -> list[Run]:
        """One run per seed, queued in that order; none when one of them duplicates an active run."""
        cfgs = seed_configs(cfg, seeds)
        for one in cfgs:
            one.validate()
        with self._lock:
            active = {r.id: r.config().get("train") for r in active_runs(runs_dir)}
            for one in cfgs:
                same = next((run_id for run_id, train in active.items() if train == one.to_dict()), None)
                if same:
                    raise DuplicateRun(f"run {same} has exactly these settings (seed {one.seed}) and is still "
                                       "queued or training; change the seed to train another", same)

            def spawner(one: TrainConfig) -> Callable[[], tuple[str, subprocess.Popen]]:
                def spawn():
                    run, proc = start_worker(runs_dir, one, data_dir=data_dir)
                    return run.id, proc
                return spawn

            return [Run(Path(runs_dir) / self.launch(runs_dir, "run", "starting another", spawner(one)))
                    for one in cfgs]

    def branch(self, runs_dir: Path, parent_ref: str, kind: str = "last", overrides: dict | None = None, *,
               data_dir: Path | None = None, keep_tags: bool = False) -> Run:
        """Create a branch of `parent_ref` (branch.create_branch) and start it (queued behind what trains)."""
        def spawn():
            run = create_branch(runs_dir, parent_ref, kind, overrides, data_dir=data_dir, keep_tags=keep_tags)
            return run.id, spawn_worker(run, data_dir=data_dir)

        return Run(Path(runs_dir) / self.launch(runs_dir, "run", "starting a branch", spawn))

    def resume(self, run: Run, *, data_dir: Path | None = None) -> None:
        """Continue an ended run from its last.pt (queued behind what trains)."""
        state = run.status().get("state")
        if state in ACTIVE_STATES:
            raise RunError(f"run {run.id} is still {state}; stop it before resuming")
        if worker_lock.held(run.path):  # before anything is written: its live worker's status stays as it is
            raise RunError(f"run {run.id} is being trained by another live process; stop it before resuming")
        pruned = resume_problem(run)
        if pruned:
            raise RunError(pruned)

        def spawn():
            lifecycle.queued_for_resume(run)
            return run.id, spawn_worker(run, data_dir=data_dir, resume=True)

        self.launch(run.path.parent, "run", "resuming another", spawn)

    def process(self, job_id: str) -> subprocess.Popen | None:
        """The process of a job started here while it runs (a sweep driver before it writes sweep.json)."""
        with self._lock:
            self.reap()
            found = self._procs.get(job_id)
            return found[1] if found else None

    def reap(self) -> None:
        """Collect exit codes of finished jobs so no zombies pile up."""
        for job_id, (_, proc) in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[job_id]
