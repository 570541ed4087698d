"""File locks on state that several processes share: a run's status.json and notes.json, its worker, a device
slot, a cache file being drawn (docs/decisions/019-file-locks.md).

Every one is filelock's `FileLock` (flock on POSIX, so the kernel drops it when its holder dies; Windows' own
lock there), with two rules of this project on top:

- a lock is never taken through a path that leads out of the folder that owns it (`root`): a symbolic link on
  the way, as the lock file or as a folder, is refused, never followed;
- a lock file that cannot be opened is a `LockError` that names it and the fix, never a lock that reads free
  (two runs on one device would follow).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout


class LockError(OSError):
    """A lock that cannot be taken here: its file cannot be opened, or its path leads out of its folder. The
    message says which file and what to do."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.message, self.filename = message, str(path)

    def __str__(self) -> str:
        return self.message


def checked(path: Path, root: Path) -> Path:
    """`path`, once it is sure that taking a lock there stays inside `root`: no symbolic link as the lock file,
    none on the way out of `root`, and its folder exists (filelock would create missing folders)."""
    path = Path(path)
    if path.is_symlink():
        raise LockError(f"{path} is a symbolic link, so it is not used as a lock: remove it (it is recreated as a "
                        "plain file)", path)
    folder = path.parent
    if not folder.resolve().is_relative_to(Path(root).resolve()):
        raise LockError(f"{folder} leads out of {root} through a symbolic link, so nothing there is locked (or "
                        "written): replace the link with the folder itself", path)
    if not folder.is_dir():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(folder))
    return path


def unusable(path: Path, exc: OSError) -> LockError:
    """The LockError for a lock file that the system refused to open."""
    if isinstance(exc, IsADirectoryError):
        fix = f"it is a folder: remove it (rm -r {path})"
    elif isinstance(exc, PermissionError):
        fix = f"make {path.parent} writable for this user, or remove {path.name} from it"
    else:
        fix = f"remove {path} (it is recreated as a plain file)"
    return LockError(f"{path} cannot be used as a lock ({exc.strerror or exc}): {fix}", path)


def try_lock(path: Path, root: Path) -> FileLock | None:
    """The lock on `path`, taken now; None while another holder (this process's other locks included) has it.
    Release it with `.release()`; LockError when it cannot be taken at all."""
    lock = FileLock(checked(path, root), thread_local=False)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        return None
    except OSError as exc:
        raise unusable(Path(path), exc) from None
    return lock


def wait_lock(path: Path, root: Path, *, timeout: float = -1) -> FileLock:
    """The lock on `path`, waited for up to `timeout` seconds (forever when negative); release it with
    `.release()`. filelock's Timeout when it stays busy, LockError when it cannot be taken at all."""
    lock = FileLock(checked(path, root), thread_local=False)
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        raise
    except OSError as exc:
        raise unusable(Path(path), exc) from None
    return lock


@contextlib.contextmanager
def holding(path: Path, root: Path, *, timeout: float = -1) -> Iterator[FileLock]:
    """Hold the lock on `path` for the block (`wait_lock`)."""
    lock = wait_lock(path, root, timeout=timeout)
    try:
        yield lock
    finally:
        lock.release()
