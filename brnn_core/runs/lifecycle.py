"""What a run's status says when no worker of it is there to say it: the driver side of status.json.

While a worker trains, its training session (training.session) writes every status. Before it starts and
after it is gone, the job registry or a sweep's driver does, and only through these functions: a worker
spawned (its pid, so a worker that dies before its first word reads as interrupted), a run queued again
for a resume, a PBT trial handed to its sweep's driver, a trial that died or never started, a trial that
was still waiting when its sweep ended, a last.pt pruned to save disk.
"""

from __future__ import annotations

import time

from brnn_core.runs.rundir import Run
from brnn_core.states import State


def spawned(run: Run, pid: int, pid_started: float | None) -> None:
    """A worker process was started for `run`: its pid until it writes its own status."""
    run.write_status(pid=pid, pid_started=pid_started)


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


def last_pt_pruned(run: Run, record: dict, message: str) -> None:
    """A sweep removed an ended trial's last.pt to save disk (`record`: time, bytes, why)."""
    run.write_status(pruned={"last.pt": record}, message=message)
