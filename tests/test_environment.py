"""environment.json (brnn_core.environment): what a run records when it starts, what a resume says changed,
git's answers in a checkout (and none when installed), and two runs side by side (brnn_core.runs.compare)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import psutil
import pytest
import torch
from helpers import REPO, copy_run

from brnn_core import environment
from brnn_core.runs.compare import side_by_side


def test_a_run_records_its_code_packages_machine_and_command(finished):
    record = json.loads((finished.path / "environment.json").read_text())
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert record["git"]["commit"] == head.strip()  # trained from this checkout
    assert isinstance(record["git"]["dirty"], bool)
    assert record["python"] == platform.python_version() and record["torch"] == torch.__version__
    assert record["torchvision"] == version("torchvision") and record["cuda"] == torch.version.cuda
    assert record["packages"]["numpy"] == version("numpy") and len(record["packages"]) > 50
    assert record["device"] == "cpu" and record["gpus"] == []  # no CUDA on the test machines
    assert record["command"] == psutil.Process().cmdline() and record["cpu"]["model"]  # trained in this process
    if Path("/proc/cpuinfo").is_file():
        assert set(record["cpu"]["flags"]) == set(environment.CPU_FLAGS)
    assert record["env"]["OMP_NUM_THREADS"] == "1"  # conftest's, as the worker saw it
    assert all(k.startswith(("BRNN_", "OMP_")) for k in record["env"])


def test_a_start_on_another_stack_says_what_changed(tmp_path, finished):
    run = copy_run(finished, tmp_path / "runs")
    record = json.loads((run.path / "environment.json").read_text())
    record["packages"]["numpy"] = "1.0"
    record["git"] = {**record.get("git", {}), "commit": "0" * 40}
    (run.path / "environment.json").write_text(json.dumps(record))
    environment.record(run, "cpu")  # what the next start of this run (a resume) does
    (changed,) = [e for e in run.events() if e["kind"] == "environment"]
    assert f"numpy 1.0 -> {version('numpy')}" in changed["message"] and "git commit 0000" in changed["message"]
    environment.record(run, "cpu")  # the same stack again: nothing to say
    assert len([e for e in run.events() if e["kind"] == "environment"]) == 1


GIT_STATE = "import json; from brnn_core.environment import git_state; print(json.dumps(git_state()))"


def git_state_in(root: Path) -> dict | None:
    done = subprocess.run([sys.executable, "-c", GIT_STATE], cwd=root, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_git_state_of_a_checkout_and_of_an_installed_copy(tmp_path):
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "brnn_core", root / "brnn_core", ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitignore").write_text("__pycache__/\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=60)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_state_in(root) == {"commit": head, "dirty": False, "untracked": 0, "diff_sha256": None}
    with open(root / "brnn_core" / "states.py", "a") as fh:
        fh.write("# an edit\n")
    (root / "notes.txt").write_text("new\n")
    diff = subprocess.run([*git, "diff", "HEAD", "--no-ext-diff", "--no-color", "--binary"], capture_output=True).stdout
    assert git_state_in(root) == {"commit": head, "dirty": True, "untracked": 1,
                                  "diff_sha256": hashlib.sha256(diff).hexdigest()}
    shutil.rmtree(root / ".git")  # as installed: no checkout beside the package
    assert git_state_in(root) is None


def test_two_runs_side_by_side_differences_first(tmp_path, finished):
    a = copy_run(finished, tmp_path / "runs", "20000101-000000-mnist-sample-aaaa")
    b = copy_run(finished, tmp_path / "runs", "20000102-000000-mnist-sample-bbbb")
    config = b.config()
    config["train"]["lr"] = 0.5
    b.config_path.write_text(json.dumps(config))
    record = json.loads((b.path / "environment.json").read_text())
    record["packages"]["numpy"] = "1.0"
    (b.path / "environment.json").write_text(json.dumps(record))
    table = side_by_side(a, b)
    assert list(table.columns) == ["setting", a.id, b.id, "differs"]
    differ = table[table["differs"]]
    assert list(table["differs"][:len(differ)]) == [True] * len(differ)  # every difference before the rest
    assert {"config.train.lr", "environment.packages.numpy"} <= set(differ["setting"])
    lr = table[table["setting"] == "config.train.lr"].iloc[0]
    assert (lr[a.id], lr[b.id]) == (json.dumps(a.config()["train"]["lr"]), "0.5")
    assert "environment.recorded" not in set(table["setting"])  # the moment, not the setup
    assert not table[table["setting"] == "config.train.hidden_size"]["differs"].iloc[0]


@pytest.mark.parametrize("value", [None, [1, 2]])
def test_a_damaged_environment_file_compares_as_absent(tmp_path, finished, value):
    a = copy_run(finished, tmp_path / "runs", "20000101-000000-mnist-sample-aaaa")
    b = copy_run(finished, tmp_path / "runs", "20000102-000000-mnist-sample-bbbb")
    (b.path / "environment.json").write_text(json.dumps(value))
    table = side_by_side(a, b)
    python = table[table["setting"] == "environment.python"].iloc[0]
    assert python[a.id] == platform.python_version() and python[b.id] == "" and python["differs"]
