"""A run's tags and note: `<run>/notes.json`, `{"tags": [...], "note": "..."}`, written atomically.

Tags are short words (letters, digits, `.`, `_`, `-`) that the runs filter matches with `tag:NAME`; the note
is free text, shown and stored as it is, never interpreted. A missing or damaged file reads as no tags, no note.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from brnn_core.fileio import atomic_write_json, read_json
from brnn_core.runs.rundir import check_writable

NOTES_NAME = "notes.json"
TAG = re.compile(r"[A-Za-z0-9_.\-]{1,40}")
MAX_NOTE = 10_000  # characters: a lab note, not a document


@dataclass(frozen=True)
class RunNotes:
    tags: tuple[str, ...] = ()
    note: str = ""
    extra: dict = field(default_factory=dict)  # keys a later version wrote: kept on rewrite


def read_notes(run_path: Path) -> RunNotes:
    data = read_json(Path(run_path) / NOTES_NAME, {})
    if not isinstance(data, dict):
        return RunNotes()
    tags = data.get("tags")
    tags = tuple(t for t in tags if isinstance(t, str) and TAG.fullmatch(t)) if isinstance(tags, list) else ()
    note = data.get("note") if isinstance(data.get("note"), str) else ""
    return RunNotes(tags, note, {k: v for k, v in data.items() if k not in ("tags", "note")})


def check_tag(tag: str) -> str:
    tag = tag.strip()
    if not TAG.fullmatch(tag):
        raise ValueError(f"tag {tag!r} is not a tag: use 1 to 40 letters, digits, '.', '_' or '-'")
    return tag


def write_notes(run_path: Path, *, tags: Iterable[str] | None = None, note: str | None = None) -> RunNotes:
    """Replace the tags and/or the note (None: keep as it is); returns what was written. RunError for a run
    linked in from elsewhere (read-only here)."""
    check_writable(Path(run_path))
    before = read_notes(run_path)
    tags = before.tags if tags is None else tuple(dict.fromkeys(check_tag(t) for t in tags if t.strip()))
    note = before.note if note is None else note
    if len(note) > MAX_NOTE:
        raise ValueError(f"the note has {len(note):,} characters; keep it under {MAX_NOTE:,}")
    atomic_write_json(Path(run_path) / NOTES_NAME, {**before.extra, "tags": list(tags), "note": note})
    return RunNotes(tags, note, before.extra)


def change_tags(run_path: Path, add: Iterable[str] = (), remove: Iterable[str] = ()) -> RunNotes:
    before = read_notes(run_path)
    gone = {check_tag(t) for t in remove}
    return write_notes(run_path, tags=[t for t in before.tags if t not in gone] + [check_tag(t) for t in add])
