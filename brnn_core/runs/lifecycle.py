"""What a run's status says when no worker of it is there to say it: the driver side of status.json.

While a worker trains, its training session (training.session) writes every status. Before it starts and
after it is gone, the job registry or a sweep's driver does, and only through these functions: a worker
spawned (its pid, so a worker that dies before its first word reads as interrupted), a run queued again
for a resume, a run waiting for its turn (runs.queue) or cancelled there, a PBT trial handed to its sweep's
driver, a trial that died or never started, a trial that was still waiting when its sweep ended, checkpoints
pruned to save disk.
"""

from __future__ import annotations

import socket
import time

import psutil

from brnn_core.runs.rundir import Run
from brnn_core.states import State


def spawned(run: Run, pid: int, pid_started: float | None) -> None:
    """A worker process was started for `run`: its pid until it writes its own status, and its place in the
    queue (the order of the clicks, not of the workers' start-ups)."""
    run.write_status(pid=pid, pid_started=pid_started, queued_at=time.time())


def joined_queue(run: Run, pid: int) -> float:
    """Process `pid` is the queue entry of `run` from now on; returns its `queued_at`, kept when `pid` already was
    (the registry spawned it, or the CLI queued a seed group at once), else now."""
    status = run.read_status()
    kept = status.state == State.QUEUED and status.get("pid") == pid and status.get("queued_at") is not None
    queued_at = float(status["queued_at"]) if kept else time.time()
    run.write_status(state=State.QUEUED, pid=pid, pid_started=psutil.Process(pid).create_time(),
                     host=socket.gethostname(), heartbeat=time.time(), queued_at=queued_at, slot=None, ended=None,
                     message="queued")
    return queued_at


def still_queued(run: Run, message: str) -> None:
    """A waiting run's place in line ("queued: 2nd in line, behind run X on cpu") and a fresh heartbeat."""
    run.write_status(message=message, heartbeat=time.time())


def took_slot(run: Run, slot: str) -> None:
    """The run's turn came: it holds device `slot` (runs.queue) until its worker ends."""
    run.write_status(slot=slot, message=f"starting on {slot}", heartbeat=time.time())


def cancelled_while_queued(run: Run, message: str, control_offset: int | None = None,
                           command: str | None = None) -> None:
    """A queued run left the queue before it trained: nothing to resume, nothing lost."""
    run.log_event("stop", f"{message}: it never trained", **({"command": command} if command else {}))
    run.write_status(state=State.STOPPED, message=message, ended=time.time(), slot=None,
                     **({"control_offset": control_offset} if control_offset is not None else {}))


def queued_for_resume(run: Run) -> None:
    """An ended run about to get a new worker (the Resume button)."""
    run.write_status(state=State.QUEUED, message="resuming", pid=None, created=time.time())


def handed_to_driver(run: Run, driver_pid: int, driver_started: float) -> None:
    """A PBT trial whose thread Tune ended between epochs: it waits as queued, owned by the sweep's driver."""
    status = run.stored_status()
    if status.get("state") in (State.RUNNING, State.LOADING, State.PAUSED):
        run.log_event("scheduler", "paused by the sweep's scheduler: waits for a free slot to continue",
                      step=status.get("step"))
        run.write_status(state=State.QUEUED, pid=driver_pid, pid_started=driver_started, heartbeat=time.time(),
                         message="waiting for the sweep's scheduler to continue it")


def stopped_while_waiting(run: Run) -> None:
    """The sweep ended while this trial waited for its scheduler: resumable from its last.pt."""
    run.write_status(state=State.STOPPED, ended=time.time(), pid=None,
                     message="the sweep ended while it waited for the scheduler; resumable from last.pt")


def process_died(run: Run, message: str, step: int | None) -> None:
    """A trial's process ended without its session saying how (Ray reported it)."""
    run.write_status(state=State.INTERRUPTED, message=message, step=step)


def failed_before_start(run: Run, message: str) -> None:
    """A trial that failed before any worker of it ran (e.g. on a node that does not see the runs folder)."""
    run.write_status(state=State.FAILED, message=message, ended=time.time(), pid=None)


def checkpoints_pruned(run: Run, records: dict[str, dict], message: str) -> None:
    """A prune (a sweep's, or `runs prune`) removed checkpoints of an ended run to save disk (`records`: name ->
    time, bytes, why, by, files); earlier records of other checkpoints stay."""
    before = run.stored_status().get("pruned")
    run.write_status(pruned={**(before if isinstance(before, dict) else {}), **records}, message=message)
