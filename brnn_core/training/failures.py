"""A training that raised, turned into a run that ended with a message saying what to fix: `failed` for an
error, `interrupted` for Ctrl-C. A worker must always say why it ended, even on a full disk."""

from __future__ import annotations

import contextlib
import time
import traceback
from pathlib import Path

from brnn_core.checkpoint import CheckpointError
from brnn_core.data.datasets import DatasetError
from brnn_core.locks import LockError
from brnn_core.runs.rundir import Run
from brnn_core.states import State


def failure_message(run: Run, exc: BaseException) -> str:
    """What to tell the user about `exc` ended the run: the problem and the fix."""
    if isinstance(exc, (DatasetError, CheckpointError, ValueError, LockError)):
        return str(exc)
    if isinstance(exc, OSError):
        where = Path(str(exc.filename or run.path))
        if where.is_absolute() and not where.is_relative_to(run.path.resolve()) and \
                not where.is_relative_to(run.path.absolute()):  # e.g. an unreadable data folder
            return f"{exc.strerror or exc} ({where}): make it readable, then resume this run"
        return f"{exc.strerror or exc} ({where}): free disk space or make the runs folder writable, then resume " \
               "this run"
    return f"{type(exc).__name__}: {exc}"


def record_end(run: Run, exc: BaseException) -> str:
    """Write how `exc` ended the run (an event and status.json); returns its final state."""
    if isinstance(exc, KeyboardInterrupt):
        with contextlib.suppress(OSError):
            run.log_event("stop", "interrupted from the keyboard")
            run.write_status(state=State.INTERRUPTED, message="interrupted from the keyboard", ended=time.time())
        return State.INTERRUPTED
    message = failure_message(run, exc)
    with contextlib.suppress(OSError):
        if not isinstance(exc, (DatasetError, CheckpointError, ValueError, OSError)):  # a bug: keep its trace
            run.log_event("traceback", "".join(traceback.format_exception(exc)))
        run.log_event("error", message)
    with contextlib.suppress(OSError):  # disk full: the last resort rewrites it in place
        run.write_status(state=State.FAILED, message=message, ended=time.time(), last_resort=True)
    return State.FAILED
