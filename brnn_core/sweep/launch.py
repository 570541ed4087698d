"""The dashboard starting a sweep: the same `python -m brnn_core sweep` command, in the background.

The Sweep page checks the request with `plan_sweep` (so its form shows the CLI's messages inline),
then `SweepRegistry.start` spawns the driver in its own session with its output in the sweep's
driver.log. Like a run, a sweep lives on disk: the page reads sweep.json and the trials' run
directories; the registry only remembers the processes this server started, to reap them and to
show why one ended before it wrote sweep.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from ..jobs import active_runs
from ..runs import RunError
from .plan import SweepRequest, plan_sweep
from .records import Sweep, active_sweeps, sweeps_dir

REPO = Path(__file__).resolve().parents[2]


def request_args(request: SweepRequest) -> list[str]:
    """The CLI options for a request (what a user would type to run the same sweep)."""
    args = [a for s in request.sets for a in ("--set", s)] + [a for s in request.search for a in ("--search", s)]
    options = {"--trials": request.trials, "--scheduler": request.scheduler, "--metric": request.metric,
               "--perturbation-interval": request.perturbation_interval, "--concurrency": request.concurrency,
               "--cpus-per-trial": request.cpus_per_trial, "--gpus-per-trial": request.gpus_per_trial,
               "--address": request.address, "--name": request.name, "--keep-best": request.keep_best,
               "--config": request.config}
    args += [a for k, v in options.items() if v is not None for a in (k, f"{v:g}" if isinstance(v, float) else str(v))]
    return args + (["--keep-all-checkpoints"] if request.keep_all else [])


def spawn_sweep(runs_dir: Path, data_dir: Path, request: SweepRequest) -> tuple[str, subprocess.Popen]:
    """Check the request, then start its driver; returns (sweep id, process) at once."""
    plan = plan_sweep(request, runs_dir, data_dir)
    folder = sweeps_dir(runs_dir) / plan.sweep_id
    folder.mkdir(parents=True)
    cmd = [sys.executable, "-m", "brnn_core", "sweep", "--runs-dir", str(Path(runs_dir).resolve()),
           "--data-dir", str(Path(data_dir).resolve()), *request_args(request), "--sweep-id", plan.sweep_id]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BRNN_PROGRESS": "plain"}
    with open(Sweep(folder).log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=str(REPO), start_new_session=True)
    return plan.sweep_id, proc


class SweepRegistry:
    """Sweep drivers this server started, by sweep id. Shared by every session (st.cache_resource): locked."""

    def __init__(self):
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen] = {}

    def start(self, runs_dir: Path, data_dir: Path, request: SweepRequest) -> str:
        """Start a sweep unless one (or a single run) is training: the cores would be shared."""
        with self._lock:
            self._reap()
            if any(p.poll() is None for p in self._procs.values()) or active_sweeps(runs_dir):
                raise RunError("a sweep is already running; stop it (or wait for it) before starting another")
            busy = active_runs(runs_dir)
            if busy:
                raise RunError(f"run {busy[0].id} is {busy[0].status()['state']}; stop it before starting a sweep")
            sweep_id, proc = spawn_sweep(runs_dir, data_dir, request)
            self._procs[sweep_id] = proc
            return sweep_id

    def starting(self, sweep_id: str) -> subprocess.Popen | None:
        """The driver process of a sweep started here, while it has not written sweep.json."""
        with self._lock:
            return self._procs.get(sweep_id)

    def _reap(self) -> None:
        for sweep_id, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[sweep_id]
