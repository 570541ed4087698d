"""What is wrong with a run folder's files, in words for the runs table's problem column: a folder where a file
should be (or a file for checkpoints/), a file that cannot be read, a run folder linked in from elsewhere. One
damaged file is its run's problem, never the listing's (runs.index reads every run through these)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from brnn_core.runs.rundir import linked_to

T = TypeVar("T")


def shape_problems(path: Path, files: Iterable[str]) -> list[str]:
    """Which of `files` are something else than a file (a folder, a device), and a checkpoints that is no folder."""
    wrong = [f"{name} is not a file" for name in files if (path / name).exists() and not (path / name).is_file()]
    checkpoints = path / "checkpoints"
    return wrong + (["checkpoints is not a folder"] if checkpoints.exists() and not checkpoints.is_dir() else [])


def read_or_problem(read: Callable[[], T], default: T, name: str, problems: list[str]) -> T:
    """read(), or `default` with why `name` cannot be read added to `problems` (unless they say it already)."""
    try:
        return read()
    except OSError as exc:
        if not any(p.startswith(name) for p in problems):
            problems.append(f"{name} cannot be read ({exc.strerror or type(exc).__name__})")
        return default


def link_problem(path: Path) -> tuple[str | None, str | None]:
    """(where the run really is, the problem column's words) for a run folder linked in from elsewhere; (None,
    None) for an ordinary one. Nothing is written through such a link (runs.rundir.write_problem)."""
    target = linked_to(path)
    if target is None:
        return None, None
    return str(target), f"a link to {target}: read-only here (never trained, tagged, pruned or deleted through it)"
