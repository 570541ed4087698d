"""`make run` and `make test` build the venv themselves: where the disk lacks room for a new one, they say so, with
the fix, before pip starts (pip would stop part-way through PyTorch's CUDA libraries with "No space left on device")."""

from __future__ import annotations

import shutil
import subprocess

from helpers import REPO


def test_a_new_venv_without_the_disk_space_it_needs_is_refused_before_pip_starts(tmp_path):
    venv = tmp_path / "not-yet" / "venv"  # its folder too is made only by `python -m venv`: the disk is tmp_path's
    need = int(shutil.disk_usage(tmp_path).free / 2**30) + 1  # one GiB more than this disk has free
    proc = subprocess.run(["make", f"VENV={venv}", f"VENV_GB={need}", f"{venv}/.requirements-installed"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"the virtual environment {venv} needs about {need} GiB and {tmp_path} has" in proc.stderr, proc.stderr
    assert "Free some disk space there" in proc.stderr and "pip" not in proc.stdout, proc.stdout + proc.stderr
    assert not venv.exists()
