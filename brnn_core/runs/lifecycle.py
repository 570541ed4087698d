"""What a run's status says when no worker of it is there to say it: the driver side of status.json.

While a worker trains, its training session (training.session) writes every status. Before it starts and
after it is gone, the job registry, the queue or a sweep's driver does, and only through these functions: a
worker spawned (its pid, so a worker that dies before its first word reads as interrupted), a run queued again
for a resume, a job waiting for its turn (runs.job_queue), cancelled there or given its turn, a tool job's end, a
trial that died or never started, a trial that was still waiting when its sweep ended, checkpoints pruned to
save disk. Both sides write through the same `Run.write_status` (runs.status.update_status).
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
    def place(status) -> dict:
        kept = status.state == State.QUEUED and status.get("pid") == pid and status.get("queued_at") is not None
        return {"queued_at": float(status["queued_at"]) if kept else time.time()}

    written = run.write_status(derive=place, state=State.QUEUED, pid=pid, pid_started=psutil.Process(pid).create_time(),
                               host=socket.gethostname(), heartbeat=time.time(), slot=None, ended=None,
                               message="queued")
    return float(written["queued_at"])


def still_queued(run: Run, message: str) -> None:
    """A waiting run's place in line ("queued: 2nd in line, behind run X on cpu") and a fresh heartbeat."""
    run.write_status(message=message, heartbeat=time.time())


def took_slots(run: Run, slots: tuple[str, ...], state: str) -> None:
    """The job's turn came: it holds device `slots` (runs.job_queue) until it ends, and is now in `state`."""
    where = "+".join(slots)
    run.write_status(derive=lambda status: {"started": status.get("started") or time.time()}, slot=where,
                     state=state, message=f"starting on {where}", heartbeat=time.time(), ended=None)


def job_ended(run: Run, state: str, message: str) -> None:
    """A job that is not a run (an lr range test, a predraw, a sweep's driver) ended: how, and its slots freed."""
    run.write_status(state=state, message=message, ended=time.time(), slot=None)


def cancelled_while_queued(run: Run, message: str, control_offset: int | None = None,
                           command: str | None = None) -> None:
    """A queued run left the queue before it trained: nothing to resume, nothing lost."""
    run.log_event("stop", f"{message}: it never trained", **({"command": command} if command else {}))
    run.write_status(state=State.STOPPED, message=message, ended=time.time(), slot=None,
                     **({"control_offset": control_offset} if control_offset is not None else {}))


def queued_for_resume(run: Run) -> None:
    """An ended run about to get a new worker (the Resume button)."""
    run.write_status(state=State.QUEUED, message="resuming", pid=None, created=time.time())


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
    def merged(status) -> dict:
        before = status.get("pruned")
        return {"pruned": {**(before if isinstance(before, dict) else {}), **records}}

    run.write_status(derive=merged, message=message)
