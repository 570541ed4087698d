"""Running real sweeps from the tests: the CLI in its own process group, its Ray processes watched.

Every sweep here is tiny (mnist-sample, hidden 8, one layer, 1-3 epochs) and runs an embedded Ray
on 127.0.0.1, or joins a head the test starts itself (`ray_head`). Nothing is ever ended by name:
processes are ended by the process group the test created.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from helpers import REPO, cli_env, tail

from brnn_core.runs.rundir import Run
from brnn_core.sweep.plan import SweepRequest, plan_sweep
from brnn_core.sweep.records import Sweep, create_trial_run, list_sweeps, sweeps_dir
from brnn_core.sweep.runner import create_sweep

TINY = ["--set", "hidden_size=8", "--set", "num_layers=1"]
SWEEP_TIMEOUT = 900  # s: two busy cores, and Ray takes its time to start


@contextlib.contextmanager
def sweep_process(args: list[str], runs_dir: Path, data_dir: Path, log: Path, env: dict | None = None):
    """`python -m brnn_core sweep ARGS` in a new process group, output to `log` (`env` adds variables), for a `with`
    block: whatever ends the block (a failed wait, an assertion), a sweep still running then is ended with its
    process group, so no Ray of a failed test outlives it."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "brnn_core", "sweep", "--runs-dir", str(runs_dir),
                                 "--data-dir", str(data_dir), *map(str, args)], cwd=REPO,
                                env={**cli_env(runs_dir, data_dir), **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            end_group(proc)


class Descendants(threading.Thread):
    """Records every process below `pid` (Ray's GCS, raylet, agents, workers) while it runs."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.seen, self.done = pid, {}, threading.Event()

    @classmethod
    def watching(cls, pid: int) -> Descendants:
        """A watcher already recording below `pid`."""
        watch = cls(pid)
        watch.start()
        return watch

    def run(self) -> None:
        try:
            root = psutil.Process(self.pid)
            while not self.done.is_set():
                for child in root.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        self.seen.setdefault(child.pid, child.create_time())
                time.sleep(0.5)
        except psutil.Error:
            return

    def alive(self) -> list[int]:
        out = []
        for pid, started in self.seen.items():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if abs(proc.create_time() - started) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
        return out


def finish(proc: subprocess.Popen, log: Path, timeout: float = SWEEP_TIMEOUT) -> tuple[int, str]:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        end_group(proc)
        raise AssertionError(f"the sweep did not end in {timeout:.0f}s:\n{tail(log)}") from None
    return proc.returncode, log.read_text(errors="replace")


def run_sweep(args: list[str], runs_dir: Path, data_dir: Path, log: Path) -> tuple[int, str, Descendants]:
    """Run a sweep to its end; returns (exit code, output, the Ray processes it had)."""
    with sweep_process(args, runs_dir, data_dir, log) as proc:
        watch = Descendants.watching(proc.pid)
        code, out = finish(proc, log)
    watch.done.set()
    return code, out, watch


def end_group(proc: subprocess.Popen, grace: float = 45.0) -> None:
    """SIGTERM the process group the test started, then SIGKILL what is left (a Ray head drains up to 30 s)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def the_sweep(runs_dir: Path) -> Sweep:
    sweeps = list_sweeps(runs_dir)
    assert len(sweeps) == 1, sweeps
    return sweeps[0]


def trial_runs(sweep: Sweep) -> dict[str, Run]:
    """Trial number ('t00') -> run."""
    return {run.id.rsplit("-", 1)[-1]: run for run in sweep.trial_runs()}


def val_rows(run: Run):
    m = run.metrics()
    return m[m["split"] == "val"].reset_index(drop=True)


def written_sweep(runs: Path, data: Path) -> str:
    """A 4-trial lr sweep's files as its driver and trials leave them, written with the sweep's own writers and no
    Ray (for the pages, which only read them): two trials finished, one training (this process stands in for its
    worker and for the driver), one queued. Returns the sweep id."""
    request = SweepRequest(search=["lr=loguniform:0.001:0.03"], trials=4,
                           sets=["dataset=mnist-sample", "hidden_size=8", "num_layers=1", "epochs=2"])
    plan = plan_sweep(request, runs, data)
    create_sweep(plan, sweeps_dir(runs) / plan.sweep_id, runs.parent / "ray", data)
    me = {"pid": os.getpid(), "pid_started": psutil.Process().create_time(), "heartbeat": time.time()}
    ids = []
    for k, lr in enumerate((0.003, 0.01, 0.02, 0.0015)):
        run = create_trial_run(runs, data, plan.sweep_id, f"a1b2c_{k:05d}", {**plan.base, "lr": lr}, {"lr": lr},
                               "fifo", "val_loss")
        ids.append(run.id)
        if k < 2:
            for epoch in (1, 2):
                run.log_metric(step=8 * epoch, epoch=epoch, split="train", loss=1.0 / epoch, lr=lr)
                run.log_metric(step=8 * epoch, epoch=epoch, split="val", loss=0.8 / epoch + 0.1 * k, accuracy=0.8,
                               lr=lr)
            run.write_status(state="finished", message="finished", step=16, epoch=2)
        elif k == 2:
            run.write_status(state="running", message="epoch 1/2", step=4, epoch=0, **me)
    Sweep(sweeps_dir(runs) / plan.sweep_id).write(trials=ids)
    return plan.sweep_id
