"""Shared by the dashboard tests (AppTest and browser): tiny trained runs, waiting, and cleanup.

Everything here works on temporary folders: the tests never touch ./runs or ./data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from polling import poll

from brnn_core.runs import Run, list_runs

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "streamlit_app.py"
ACTIVE = ("queued", "loading", "running", "paused", "stopping")

_templates: dict[tuple, Path] = {}


def start_cli_training(runs_dir: Path, data_dir: Path, *settings: str, log: Path | None = None) -> subprocess.Popen:
    """`python -m brnn_core train --set ...` into runs_dir, in the background (see finish_cli_training)."""
    env = {**os.environ, "BRNN_RUNS_DIR": str(runs_dir), "BRNN_DATA_DIR": str(data_dir), "BRNN_PROGRESS": "plain"}
    args = [a for s in settings for a in ("--set", s)]
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen([sys.executable, "-m", "brnn_core", "train", *args], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        if log:
            out.close()


def finish_cli_training(proc: subprocess.Popen, runs_dir: Path, timeout: float = 900) -> Run:
    """Wait for a start_cli_training process; returns its (finished) run."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    runs = list_runs(runs_dir)
    assert proc.returncode == 0 and len(runs) == 1, f"training failed (exit {proc.returncode}) in {runs_dir}"
    assert runs[0].status()["state"] == "finished", runs[0].status()
    return runs[0]


def train_cli(runs_dir: Path, data_dir: Path, *settings: str, timeout: float = 900) -> Run:
    """Train one run with `python -m brnn_core train --set ...` into an empty runs_dir; returns it."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    assert not list_runs(runs_dir)
    log = runs_dir / ".train-cli.log"
    proc = start_cli_training(runs_dir, data_dir, *settings, log=log)
    try:
        return finish_cli_training(proc, runs_dir, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log.read_text(errors='replace')[-3000:]}") from None


def trained_template(base: Path, *settings: str) -> Run:
    """A finished run trained once per test session for these settings; copy it before changing it."""
    key = tuple(settings)
    if key not in _templates:
        folder = base / f"template-{len(_templates)}"
        runs_dir = folder / "runs"
        runs_dir.mkdir(parents=True)
        _templates[key] = train_cli(runs_dir, folder / "data", *settings).path
    return Run(_templates[key])


def copy_run(run: Run, runs_dir: Path, run_id: str | None = None) -> Run:
    runs_dir.mkdir(parents=True, exist_ok=True)
    target = runs_dir / (run_id or run.id)
    shutil.copytree(run.path, target)
    return Run(target)


def wait_for(predicate: Callable[[], object], what: str, timeout: float = 120.0, interval: float = 0.2):
    """`polling.poll` with the argument order these app tests use, failing as an AssertionError (callers add
    the worker's log to it)."""
    try:
        return poll(predicate, timeout, what, interval)
    except pytest.fail.Exception as exc:
        raise AssertionError(str(exc)) from None



def wait_for_state(run: Run, states: str | tuple[str, ...], timeout: float = 120.0) -> dict:
    states = (states,) if isinstance(states, str) else states
    status = wait_for(lambda: (s := run.status()).get("state") in states and s,
                      f"run {run.id} to be {'/'.join(states)} (is {run.status().get('state')})", timeout)
    return status


def kill_workers(runs_dir: Path) -> None:
    """Kill every worker process named in the runs' status.json (workers run in their own session)."""
    if not Path(runs_dir).is_dir():
        return
    import psutil

    for run in list_runs(runs_dir):
        status = run.raw_status()
        pid = status.get("pid")
        if not pid:
            continue
        try:
            proc = psutil.Process(int(pid))
            started = status.get("pid_started")
            if started is not None and abs(proc.create_time() - float(started)) >= 1.0:
                continue  # the pid was reused by someone else's process
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(psutil.TimeoutExpired):
                proc.wait(10)
            if proc.is_running():
                proc.kill()
                proc.wait(10)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError, ValueError):
            continue
