"""`make bench-gpu` (benchmarks/cuda_check.py): one line and exit 0 without CUDA; every check runs (CPU smoke test)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO, worker_env


@pytest.mark.worker
def test_make_bench_gpu_without_cuda_prints_one_line_and_exits_0():
    # -o: take the venv as up to date (make would otherwise reinstall it when requirements.txt is newer)
    proc = subprocess.run(["make", "-s", "-o", ".venv/.requirements-installed", "bench-gpu"], cwd=REPO,
                          env=worker_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench-gpu: no CUDA GPU on this machine"), proc.stdout


@pytest.mark.worker
@pytest.mark.slow
def test_bench_gpu_checks_run_on_the_cpu(tmp_path):
    """The same script at smoke sizes on the CPU: every check produces its rows and the results are written."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cuda_check", "--device", "cpu", "--quick", "--out",
                           str(tmp_path), "--only", "crash,accuracy,picker"], cwd=REPO,
                          env=worker_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [result] = tmp_path.glob("*_gpu-check.json")
    rows = {(r["bench"], r["case"]): r for r in json.loads(result.read_text())["rows"]}
    assert rows[("crash", "brnn_core engine: train, evaluate, eval(), train")]["met"] == "yes"
    ours = rows[("accuracy", "brnn_core run (defaults: bidir head, 10% held out)")]
    theirs = rows[("accuracy", "blog loop (out[:, -1, :], the whole training set)")]
    assert 30 < ours["value"] <= 100 and 30 < theirs["value"] <= 100 and ours["reps"] == 2  # real training, 2 seeds
    assert rows[("picker", "Train page Device select = config.device_choices()")]["met"] == "yes"
    assert [p.name for p in tmp_path.iterdir()] == [result.name]  # one results file
