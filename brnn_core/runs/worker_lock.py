"""One worker per run: the lock on <run>/.worker.lock that a worker holds from joining the queue to the end of
its training (brnn_core.locks).

status.json says who trains a run, but a lost or rewritten one must not let a second worker in: the lock does
not depend on it, and the kernel drops it when its holder dies (a killed worker never blocks a resume).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from filelock import Timeout

from brnn_core.locks import try_lock, wait_lock
from brnn_core.runs.rundir import check_writable

LOCK_NAME = ".worker.lock"


class RunBusy(RuntimeError):
    """Another live process is training this run."""


def busy_message(run_path: Path) -> str:
    return (f"run {Path(run_path).name} is being trained by another live process; stop it (or wait for it to end) "
            "before resuming it")


@contextlib.contextmanager
def hold(run_path: Path, *, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the run's lock for the block; RunBusy when another holder keeps it (at once, or after waiting up to
    `wait_s` seconds for it), RunError for a run folder that leads out of its runs folder (nothing is locked
    through a link), LockError when its lock file cannot be used (the message says how to mend it)."""
    check_writable(run_path)
    try:  # a timeout of 0: filelock tries once
        lock = wait_lock(Path(run_path) / LOCK_NAME, Path(run_path).parent, timeout=max(wait_s, 0.0))
    except Timeout:
        raise RunBusy(busy_message(run_path)) from None
    try:
        yield
    finally:
        lock.release()


def held(run_path: Path) -> bool:
    """True while another process holds the run's lock (a worker trains it, whatever status.json says). Asking
    changes nothing: no lock file means no worker ever held it (every holder creates it)."""
    path = Path(run_path) / LOCK_NAME
    if not path.is_file() or path.is_symlink():
        return False
    lock = try_lock(path, Path(run_path).parent)
    if lock is None:
        return True
    lock.release()
    return False
