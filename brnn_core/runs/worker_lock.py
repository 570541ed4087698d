"""One worker per run: an advisory lock on <run>/.worker.lock that the worker holds while it trains.

status.json says who trains a run, but a lost or rewritten one must not let a second worker in: the lock does
not depend on it, and the kernel drops it when its holder dies (a killed worker never blocks a resume).
Without fcntl (Windows) there is no lock and status.json alone decides.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from brnn_core.runs.rundir import check_writable

LOCK_NAME = ".worker.lock"


class RunBusy(RuntimeError):
    """Another live process is training this run."""


def _fcntl():
    try:
        import fcntl
    except ImportError:
        return None
    return fcntl


@contextlib.contextmanager
def hold(run_path: Path) -> Iterator[None]:
    """Hold the run's lock for the block; RunBusy at once when another process holds it, RunError for a run
    folder that leads out of its runs folder (nothing is locked through a link)."""
    check_writable(run_path)
    fcntl = _fcntl()
    if fcntl is None:
        yield
        return
    try:
        fh = open(Path(run_path) / LOCK_NAME, "a")  # noqa: SIM115 (held open for the lock's lifetime)
    except OSError:
        yield  # a folder we cannot write: the run fails on its first write and says why
        return
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunBusy(f"run {Path(run_path).name} is being trained by another live process; stop it "
                          "(or wait for it to end) before resuming it") from None
        yield  # closing the file releases the lock


def held(run_path: Path) -> bool:
    """True while another process holds the run's lock (a worker trains it, whatever status.json says). Asking
    changes nothing: no lock file means no worker ever held it (every holder creates it)."""
    if not (Path(run_path) / LOCK_NAME).exists():
        return False
    try:
        with hold(run_path):
            return False
    except RunBusy:
        return True
