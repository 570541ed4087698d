"""The learning-rate range test (brnn_core.training.lr_find, `python -m brnn_core lr-find`): a real test on the
real sample digits in its turn in the queue, its CSV, its suggestion and rule, nothing saved as a run; and the
rule on a known curve."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest
from helpers import run_cli

from brnn_core.runs.job_queue import JOBS_DIR
from brnn_core.runs.rundir import Run, list_runs
from brnn_core.training.lr_find import DEFAULT_RULE, RULES, SAFETY, suggest


def test_the_rule_on_a_known_curve():
    lrs = list(np.logspace(-6, 0, 120))
    # a loss that falls fastest at lr = 1e-3 (a logistic step in log lr), then flat
    loss = [2.3 - 2.0 / (1 + np.exp(-(np.log10(lr) + 3) * 3)) for lr in lrs]
    assert suggest(lrs, loss, "steepest") == pytest.approx(1e-3 / SAFETY, rel=0.15)
    # then rising again past lr = 1e-1: the lowest point is there, the suggestion a tenth of it
    loss = [value + (max(np.log10(lr) + 1, 0)) ** 2 for lr, value in zip(lrs, loss, strict=True)]
    assert suggest(lrs, loss, "minimum") == pytest.approx(1e-1 / 10, rel=0.15)
    assert suggest(lrs, loss) == suggest(lrs, loss, DEFAULT_RULE)
    for rule in RULES:
        assert suggest(lrs, [1.0] * 120, rule) is None  # never falls: no suggestion
        assert suggest(lrs[:5], loss[:5], rule) is None


@pytest.mark.worker
def test_lr_find_on_the_sample(brnn, tmp_path, idx_data):
    runs_dir, out_file = tmp_path / "runs", tmp_path / "curve.csv"
    out = run_cli(["lr-find", "--set", "hidden_size=16", "--set", "num_layers=1", "--set", "cpu_threads=1",
                   "--set", "dataset=mnist", "--steps", "120", "--out", out_file], runs_dir, idx_data)
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(out_file.open()))
    assert list(rows[0]) == ["lr", "loss", "smoothed_loss"] and 20 <= len(rows) <= 120
    lrs = [float(r["lr"]) for r in rows]
    assert lrs == sorted(lrs) and lrs[0] == pytest.approx(1e-6)
    found = re.search(r"suggested peak lr: (\S+) \(" + re.escape(RULES[DEFAULT_RULE]), out.stdout)
    assert found, out.stdout
    assert 1e-5 < float(found.group(1)) < 1
    assert list_runs(runs_dir) == []  # a throwaway model: no run, but a job that took its turn in the queue
    (job,) = (runs_dir / JOBS_DIR).iterdir()
    assert Run(job).status()["state"] == "finished" and Run(job).status()["started"]  # it had its turn
    bad = brnn(["lr-find", "--steps", "5"], runs_dir, idx_data)
    assert bad.returncode == 2 and "--steps" in bad.stderr
