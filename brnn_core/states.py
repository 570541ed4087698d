"""The states a run can be in: the one list every module, page and the CLI read.

`State` members are plain strings (a `StrEnum`), so they compare equal to the text stored in
status.json ("running") and are written to JSON as that text.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    QUEUED = "queued"  # run directory created, no worker has picked it up yet
    LOADING = "loading"  # worker started: reading data, restoring a checkpoint
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"  # stop asked for: the worker is saving last.pt
    FINISHED = "finished"  # all epochs done and the test report written
    STOPPED = "stopped"  # ended on request (or by a sweep's scheduler); resumable from last.pt
    FAILED = "failed"  # ended by an error; the message says what to fix
    DIVERGED = "diverged"  # the loss blew up; the last good weights are kept
    INTERRUPTED = "interrupted"  # the worker died without saying so (killed, crashed, machine restarted)


# A worker is (or should be) alive in these states; the others are ends.
ACTIVE_STATES = (State.QUEUED, State.LOADING, State.RUNNING, State.PAUSED, State.STOPPING)
ENDED_STATES = tuple(s for s in State if s not in ACTIVE_STATES)
# Ended runs whose last.pt can be continued by `train --resume` or the Resume button.
RESUMABLE_STATES = (State.STOPPED, State.INTERRUPTED)
