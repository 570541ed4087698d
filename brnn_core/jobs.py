"""Background training: the worker process and its control channel.

The dashboard never trains in its own process: a crash must not take the UI down and GPU
memory must be freed when a run ends. `start_worker` creates the run directory and spawns
`python -m brnn_core train --run-dir DIR`. The dashboard controls a run by appending
commands to `control.jsonl`; the worker's `Controller` reads new lines between steps,
applies them in file order and acknowledges each one in `events.jsonl`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from .config import LIVE_FIELDS, TrainConfig
from .fileio import read_complete_lines
from .runs import ACTIVE_STATES, Run, RunError, create_run, list_runs

HEARTBEAT_S = 1.0
PAUSE_POLL_S = 0.1


class Controller:
    """The worker's end of the control channel; call it between steps (`before_step`)."""

    def __init__(self, run: Run, optimizer: torch.optim.Optimizer, settings: dict, *, status_extra=None):
        self.run = run
        self.optimizer = optimizer
        self.settings = settings  # live values: config.LIVE_FIELDS
        self.status_extra = status_extra or (lambda: {})
        # Continue after the last command an earlier worker of this run applied (0 for a new run):
        # commands sent while the worker was still loading data are applied, none twice.
        self.offset = int(run.raw_status().get("control_offset") or 0)
        self.size = -1
        self.paused = False
        self.stop_requested = False
        self.step = 0
        self.last_beat = 0.0

    def __call__(self, step: int) -> bool:
        """Apply pending commands; block while paused. False means: stop now."""
        self.step = step
        self.poll()
        while self.paused and not self.stop_requested:
            self.heartbeat()
            time.sleep(PAUSE_POLL_S)
            self.poll()
        self.heartbeat()
        return not self.stop_requested

    def poll(self) -> None:
        try:
            size = os.stat(self.run.control_path).st_size
        except FileNotFoundError:
            return
        if size == self.size:  # cheap: one stat per step
            return
        self.size = size
        lines, _ = read_complete_lines(self.run.control_path, self.offset)
        for line in lines:
            # Advance before applying, so the offset saved with a stop does not replay it on resume.
            self.offset += len(line.encode("utf-8", "surrogateescape")) + 1
            try:
                command = json.loads(line)
            except json.JSONDecodeError:
                self.run.log_event("warning", f"ignored a malformed command line: {line[:80]!r}", step=self.step)
                continue
            self.apply(command)

    def apply(self, command: dict) -> None:
        cmd, cid = command.get("cmd"), command.get("id")
        if cmd == "pause":
            if not self.paused:
                self.paused = True
                self._state("paused", f"paused at step {self.step}")
            self.run.log_event("pause", f"paused at step {self.step}", step=self.step, command=cid)
        elif cmd == "resume":
            if self.paused:
                self.paused = False
                self._state("running", f"resumed at step {self.step}")
            self.run.log_event("resume", f"resumed at step {self.step}", step=self.step, command=cid)
        elif cmd == "stop":
            self.stop_requested = True
            self._state("stopping", f"stopping at step {self.step}: saving a checkpoint")
            self.run.log_event("stop", f"stop requested at step {self.step}", step=self.step, command=cid)
        elif cmd == "set":
            self.apply_set(command.get("field"), command.get("value"), cid)
        else:
            self.run.log_event("warning", f"unknown command {cmd!r} ignored", step=self.step, command=cid)

    def apply_set(self, name, value, cid) -> None:
        if name not in LIVE_FIELDS:
            self.run.log_event("warning", f"{name!r} cannot change while training (only {', '.join(LIVE_FIELDS)})",
                               step=self.step, command=cid)
            return
        current = TrainConfig().replace(**{k: self.settings[k] for k in LIVE_FIELDS})
        try:
            checked = TrainConfig.from_dict({**current.to_dict(), name: value}, check_device=False)
        except ValueError as exc:
            self.run.log_event("warning", f"rejected {name}={value!r}: {exc}", step=self.step, command=cid)
            return
        new, old = getattr(checked, name), self.settings[name]
        self.settings[name] = new
        if name == "lr":
            for group in self.optimizer.param_groups:
                group["lr"] = new
        self.run.log_event("set", f"{name} {_show(old)} -> {_show(new)} at step {self.step}", step=self.step,
                           command=cid, field=name, old=old, new=new)
        self.run.write_status(**{**self.status_extra(), "live": dict(self.settings)})

    def _state(self, state: str, message: str) -> None:
        self.run.write_status(**{"live": dict(self.settings), **self.status_extra(), "state": state,
                                 "message": message, "step": self.step, "heartbeat": time.time(),
                                 "control_offset": self.offset})

    def heartbeat(self, force: bool = False) -> None:
        now = time.time()
        if force or now - self.last_beat >= HEARTBEAT_S:
            self.last_beat = now
            self.run.write_status(**{**self.status_extra(), "heartbeat": now, "step": self.step,
                                     "control_offset": self.offset})


def _show(value) -> str:
    """A live setting as the event log shows it: numbers compactly (0.001), names as they are (medium)."""
    return value if isinstance(value, str) else f"{value:g}"


def worker_command(run_dir: Path, *, resume: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "brnn_core", "train", "--run-dir", str(run_dir)]
    return cmd + ["--resume", str(run_dir)] if resume else cmd


def spawn_worker(run: Run, *, data_dir: Path | None = None, resume: bool = False) -> subprocess.Popen:
    """Start the worker for an existing run directory; its output goes to worker.log."""
    env = dict(os.environ)
    if data_dir is not None:
        env["BRNN_DATA_DIR"] = str(data_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("BRNN_PROGRESS", "plain")
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

    def start(self, runs_dir: Path, cfg: TrainConfig, *, data_dir: Path | None = None) -> Run:
        """Start a run unless one is already training: two quick clicks start exactly one."""
        with self._lock:
            self.reap()
            busy = active_runs(runs_dir)
            if busy:
                raise RunError(f"run {busy[0].id} is still {busy[0].status()['state']}; "
                               "stop it (or wait for it) before starting another")
            run, proc = start_worker(runs_dir, cfg, data_dir=data_dir)
            self._procs[run.id] = proc
            return run

    def resume(self, run: Run, *, data_dir: Path | None = None) -> None:
        with self._lock:
            self.reap()
            busy = active_runs(run.path.parent)
            if busy:
                raise RunError(f"run {busy[0].id} is still {busy[0].status()['state']}; "
                               "stop it before resuming another")
            run.write_status(state="queued", message="resuming", pid=None, created=time.time())
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
