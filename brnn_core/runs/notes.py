"""A run's tags and note: `<run>/notes.json`, `{"tags": [...], "note": "..."}`, written atomically.

Tags are short words (letters, digits, `.`, `_`, `-`) that the runs filter matches with `tag:NAME`; the note
is free text, shown and stored as it is, never interpreted. A missing or damaged file reads as no tags, no note.
Every change is a read-modify-write under the run's notes lock, so changes made at once by several processes
are all kept; a change checks only what it changes (a tag change keeps whatever note is there).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from brnn_core.fileio import atomic_write_json, read_json
from brnn_core.locks import holding
from brnn_core.runs.rundir import check_writable

NOTES_NAME = "notes.json"
NOTES_LOCK = ".notes.lock"  # beside notes.json: held for each read-modify-write
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


def check_note(note: str) -> str:
    if len(note) > MAX_NOTE:
        raise ValueError(f"the note has {len(note):,} characters; keep it under {MAX_NOTE:,}")
    return note


def write_notes(run_path: Path, *, tags: Iterable[str] | None = None, note: str | None = None) -> RunNotes:
    """Replace the tags and/or the note (None, or the note as stored: kept as it is, unchecked, e.g. the Runs
    page saving new tags beside a long note written elsewhere); returns what was written."""
    tags = None if tags is None else tuple(dict.fromkeys(check_tag(t) for t in tags if t.strip()))

    def changed(before: RunNotes) -> tuple[tuple[str, ...], str]:
        kept = note is None or note == before.note
        return before.tags if tags is None else tags, before.note if kept else check_note(note)

    return _change(run_path, changed)


def change_tags(run_path: Path, add: Iterable[str] = (), remove: Iterable[str] = ()) -> RunNotes:
    """Add and remove tags, keeping the others (and the note) as another process may just have written them."""
    gone, new = {check_tag(t) for t in remove}, [check_tag(t) for t in add]
    return _change(run_path, lambda before: (tuple(dict.fromkeys([t for t in before.tags if t not in gone] + new)),
                                             before.note))


def _change(run_path: Path, change: Callable[[RunNotes], tuple[tuple[str, ...], str]]) -> RunNotes:
    """notes.json read, changed by `change(before) -> (tags, note)` and rewritten, under the run's notes lock."""
    run_path = Path(run_path)
    check_writable(run_path)  # a run linked in from elsewhere is read-only here (RunError)
    with holding(run_path / NOTES_LOCK, run_path.parent):
        before = read_notes(run_path)
        tags, note = change(before)
        atomic_write_json(run_path / NOTES_NAME, {**before.extra, "tags": list(tags), "note": note})
    return RunNotes(tags, note, before.extra)
