"""The dashboard's RunIndex kept on disk, so a new server starts with what the last one had read.

The entries of runs that have ended and settled are saved in `.index.json` in the runs folder (skipped by every
listing: its name starts with a dot). A saved entry is used only under the test an in-memory one passes (the
run folder's and checkpoints/ folder's mtimes unchanged); anything else is read again. The file is only a
cache: unreadable, of another format or another folder, it is ignored, and deleting it costs one slower page.
"""

from __future__ import annotations

import json
from pathlib import Path

from brnn_core.fileio import atomic_write_json

STORE_NAME = ".index.json"
STORE_VERSION = 4  # bump when an IndexedRun is read differently: older stores are read again


def load(path: Path, runs_dir: Path) -> dict[str, dict]:
    """run id -> its saved entry (as `IndexedRun.to_dict` made it) for this runs folder; {} when nothing is usable."""
    try:
        saved = json.loads(Path(path).read_text())
        if saved.get("version") != STORE_VERSION or saved.get("runs_dir") != str(Path(runs_dir).resolve()):
            return {}
        entries = saved["entries"]
        return entries if isinstance(entries, dict) else {}
    except (OSError, ValueError, AttributeError, KeyError):
        return {}


def save(path: Path, runs_dir: Path, entries: dict[str, dict]) -> None:
    atomic_write_json(Path(path), {"version": STORE_VERSION, "runs_dir": str(Path(runs_dir).resolve()),
                                   "entries": entries})
