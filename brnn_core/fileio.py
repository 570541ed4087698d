"""Crash-safe file writes: a reader never sees half a file or half a line.

Whole files are written to a temp file in the same folder and renamed over the target
(rename is atomic on POSIX and Windows). Log lines are appended with one `os.write` on an
O_APPEND descriptor, so concurrent writers never interleave and a killed writer leaves
either the whole line or nothing. `inside` is the one answer to "does this path really lie in
that folder", asked before anything is written, deleted or locked there.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def inside(path: Path | str, folder: Path | str) -> bool:
    """True when `path` lies in `folder` (or is it) once every symlink on the way to either is followed.

    A path that leads out of its folder through a symlink (a run folder linked in from elsewhere, a
    checkpoints/ that is a link) is not inside: nothing may be written, deleted or locked through it."""
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def unwritable(path: Path | str) -> str | None:
    """Why a file cannot be written at `path` (None: it can), asked before long work that ends by writing it.
    It tries for real (permissions, a read-only disk, a file where a folder should be) and leaves nothing behind:
    a probe file in the nearest existing folder is removed, an existing file is opened for appending, unchanged."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder"
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists() or p == Path(p.anchor or "."))
    if not folder.is_dir():
        return f"{folder} is not a folder"
    target = path if path.exists() else folder
    try:
        if path.exists():
            with open(path, "ab"):
                pass
        else:
            fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return f"{target} cannot be written ({exc.strerror or exc})"
    return None


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(fh)` on a temp file next to `path`, fsync it, then rename over `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link `source` as `target` (no extra disk), or copy it where links are not possible.

    Safe because files here are only ever replaced by rename (atomic_write): a later rewrite of
    `source` gives it a new inode and leaves `target` holding the content it had now."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def atomic_write_json(path: Path, data: Any) -> None:
    blob = (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode()
    atomic_write(path, lambda fh: fh.write(blob))


def append_line(path: Path, line: str) -> None:
    """Append one whole line (newline added) with a single write call."""
    data = (line.rstrip("\n") + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # disk full mid-line: never leave a partial line behind
            os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - written)
            raise OSError(28, "No space left on device", str(path))
    finally:
        os.close(fd)


def _not_there(exc: OSError) -> bool:
    """True for a path that holds no file to read: missing, a folder where a file should be, a symlink loop.
    Readers treat these like a missing file; an unreadable file (permissions, I/O) is still an error."""
    return isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError) or exc.errno == errno.ELOOP


def keep_rows(path: Path, keep: Callable[[float], bool]) -> int:
    """Rewrite a CSV log (atomically) with its header and the whole lines whose first field, a step, `keep` accepts
    (a line without a number there reads as infinite); the number of lines removed."""
    lines = Path(path).read_text(errors="surrogateescape").splitlines(keepends=True)
    kept = lines[:1] + [line for line in lines[1:] if line.endswith("\n") and keep(_first_number(line))]
    if len(kept) != len(lines):
        atomic_write(path, lambda fh: fh.write("".join(kept).encode(errors="surrogateescape")))
    return len(lines) - len(kept)


def _first_number(line: str) -> float:
    try:
        return float(line.split(",", 1)[0])
    except ValueError:
        return float("inf")


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return default
    except OSError as exc:
        if _not_there(exc):
            return default
        raise


_UNSIZED_READ = 1 << 16  # bytes


def read_complete_lines(path: Path, offset: int = 0) -> tuple[list[str], int]:
    """Lines from byte `offset` that end in a newline, and the offset after the last one."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            size = os.fstat(fh.fileno()).st_size
            # up to the size it has now: a device (a log linked to /dev/full or /dev/zero) never ends. One that
            # reports no size (a device, a /proc file) is read a bounded piece, so a read that fails still says so
            data = fh.read(max(size - offset, 0) if size else _UNSIZED_READ)
    except OSError as exc:
        if _not_there(exc):
            return [], offset
        raise
    end = data.rfind(b"\n") + 1
    # surrogateescape: line.encode("utf-8", "surrogateescape") gives back the exact bytes
    lines = data[:end].decode("utf-8", errors="surrogateescape").split("\n")[:-1]
    return lines, offset + end
