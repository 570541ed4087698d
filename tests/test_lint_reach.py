"""Ruff checks every tracked Python file: an exclude in pyproject.toml that matches too much (a bare
"data" also skips brnn_core/data) makes this fail instead of silently leaving code unlinted.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO


def _tracked_python_files() -> set[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files to compare with")
    out = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=REPO, capture_output=True, check=True)
    names = [n for n in out.stdout.decode().split("\0") if n]
    # a tracked file deleted in the working tree (a move not yet committed) has nothing to lint
    return {n for n in names if (REPO / n).is_file()}


def _files_ruff_checks() -> set[str]:
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--show-files", "."], cwd=REPO,
                         capture_output=True, text=True, check=True)
    return {Path(line).resolve().relative_to(REPO).as_posix() for line in out.stdout.splitlines() if line.strip()}


def test_ruff_checks_every_tracked_python_file():
    tracked = _tracked_python_files()
    assert len(tracked) > 10, tracked
    unchecked = sorted(tracked - _files_ruff_checks())
    assert not unchecked, (f"ruff never checks {unchecked}: anchor pyproject.toml's extend-exclude to the "
                           "repository root (\"./data\", not \"data\")")
