"""The dashboard starting a sweep: the same `python -m brnn_core sweep` command, in the background.

The Sweep page checks the request with `plan_sweep` (so its form shows the CLI's messages inline),
then `start_sweep` spawns the driver (through the same job registry as runs) in its own session with its
output in the sweep's driver.log; the driver waits in the queue until the whole machine is free (sweep.cli).
Like a run, a sweep lives on disk: the page reads sweep.json and the trials' run directories; the registry only
remembers the processes this server started, to reap them and to show why one ended before it wrote sweep.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from brnn_core.runs.jobs import JobRegistry, spawn
from brnn_core.sweep.plan import SweepRequest, plan_sweep
from brnn_core.sweep.records import RESUMABLE, Sweep, sweeps_dir
from brnn_core.sweep.space import SweepError


def request_args(request: SweepRequest) -> list[str]:
    """The CLI options for a request (what a user would type to run the same sweep)."""
    args = [a for s in request.sets for a in ("--set", s)] + [a for s in request.search for a in ("--search", s)]
    options = {"--trials": request.trials, "--scheduler": request.scheduler, "--metric": request.metric,
               "--perturbation-interval": request.perturbation_interval, "--concurrency": request.concurrency,
               "--cpus-per-trial": request.cpus_per_trial, "--gpus-per-trial": request.gpus_per_trial,
               "--address": request.address, "--name": request.name, "--keep-best": request.keep_best,
               "--config": request.config, "--search-alg": request.search_alg,
               "--grace-period": request.grace_period, "--reduction-factor": request.reduction_factor,
               "--time-budget": request.time_budget_min}
    args += [a for k, v in options.items() if v is not None for a in (k, f"{v:g}" if isinstance(v, float) else str(v))]
    return args + (["--keep-all-checkpoints"] if request.keep_all else [])


def spawn_driver(sweep: Sweep, args: list[str]) -> subprocess.Popen:
    """`python -m brnn_core sweep ARGS` in its own session, its output appended to the sweep's driver.log."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BRNN_PROGRESS": "plain"}
    return spawn([sys.executable, "-m", "brnn_core", "sweep", *args], sweep.log_path, env)


def spawn_sweep(runs_dir: Path, data_dir: Path, request: SweepRequest) -> tuple[str, subprocess.Popen]:
    """Check the request, then start its driver; returns (sweep id, process) at once."""
    plan = plan_sweep(request, runs_dir, data_dir)
    folder = sweeps_dir(runs_dir) / plan.sweep_id
    folder.mkdir(parents=True)
    args = ["--runs-dir", str(Path(runs_dir).resolve()), "--data-dir", str(Path(data_dir).resolve()),
            *request_args(request), "--sweep-id", plan.sweep_id]
    return plan.sweep_id, spawn_driver(Sweep(folder), args)


def start_sweep(registry: JobRegistry, runs_dir: Path, data_dir: Path, request: SweepRequest) -> str:
    """Start a sweep through the one job registry (it waits in the queue for the whole machine); its id."""
    return registry.launch(lambda: spawn_sweep(runs_dir, data_dir, request))


def resumable(sweep: Sweep) -> bool:
    """What `sweep --resume` accepts: a stopped, interrupted or failed sweep whose Tune experiment was saved."""
    return sweep.info().get("state") in RESUMABLE and (sweep.tune_dir / "tuner.pkl").is_file()


def continue_sweep(registry: JobRegistry, sweep: Sweep) -> str:
    """Continue Sweep: `sweep --resume ID` in the background, through the one job registry; the sweep's id."""
    if not resumable(sweep):
        raise SweepError(f"sweep {sweep.id} is {sweep.info().get('state')}: nothing to continue")
    args = ["--runs-dir", str(Path(sweep.runs_dir).resolve()), "--resume", sweep.id]
    return registry.launch(lambda: (sweep.id, spawn_driver(sweep, args)))
