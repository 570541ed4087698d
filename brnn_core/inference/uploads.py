"""Saving uploaded checkpoint files: never by their own name, never outside the runs folder.

An upload's name comes from the browser, so it is only used for its extension (one of
`ALLOWED_SUFFIXES`). The file is stored as `runs/.uploads/<sha256 prefix><suffix>`, written
atomically; the same bytes uploaded twice land on the same file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath, PureWindowsPath

from brnn_core.fileio import atomic_write, inside

UPLOADS_FOLDER = ".uploads"
ALLOWED_SUFFIXES = (".pt", ".ckpt", ".pth")
DEFAULT_MAX_BYTES = 50 * 2**20


class UploadError(ValueError):
    """An upload that is refused; the message says why."""


def safe_suffix(filename: str) -> str:
    """The upload's extension if it is a checkpoint one, else .pt (the name is never used as a path)."""
    name = PureWindowsPath(PurePosixPath(str(filename or "")).name).name  # last part, / or \ separated
    suffix = Path(name).suffix.lower() if "\x00" not in name else ""
    return suffix if suffix in ALLOWED_SUFFIXES else ".pt"


def save_upload(runs_dir: Path, data: bytes, filename: str = "", max_bytes: int = DEFAULT_MAX_BYTES) -> Path:
    """Store `data` under `runs_dir/.uploads` by content hash and return the path.

    Raises UploadError when the data is over `max_bytes` or empty, or when the uploads folder
    would resolve outside `runs_dir` (a symlink planted there).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise UploadError(f"expected the uploaded bytes, got {type(data).__name__}")
    data = bytes(data)
    shown = repr(str(filename)[:80]) if filename else "the upload"
    if len(data) > max_bytes:
        raise UploadError(f"{shown} is {len(data) / 2**20:.1f} MB; the limit is {max_bytes / 2**20:.0f} MB")
    if not data:
        raise UploadError(f"{shown} is empty (0 bytes); it is not a checkpoint")
    root = Path(runs_dir).resolve()
    folder = root / UPLOADS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    if not inside(folder, root):
        raise UploadError(f"{folder} points outside the runs folder {root}; remove it")
    target = folder / f"{hashlib.sha256(data).hexdigest()[:20]}{safe_suffix(filename)}"
    if not (target.is_file() and not target.is_symlink() and target.stat().st_size == len(data)):
        atomic_write(target, lambda fh: fh.write(data))
    return target
