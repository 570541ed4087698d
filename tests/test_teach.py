"""Teach it: a fine-tune of a checkpoint on the saved drawings, from the CLI and from the Predict page."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch
from helpers import REPO, build_app, cli_env, copy_run, no_exception, rerun_until, wait_for
from test_drawings import save_many

from brnn_core import devices
from brnn_core.config import TEACH_DEFAULTS
from brnn_core.data.datasets import MNIST_CLASSES
from brnn_core.data.drawings import MIN_FOR_ACCURACY, list_drawings
from brnn_core.runs.rundir import Run, list_runs
from brnn_core.training.reports import read_report
from brnn_core.training.teach import TeachError, teach_config


def saved_drawings(data_dir, sample, n: int = 15) -> None:
    save_many(data_dir, sample.test_x[:n], sample.test_y[:n])  # digits the checkpoint never trained on


def test_teach_config_keeps_the_checkpoint_and_its_validation_split(tmp_path, finished, sample):
    saved_drawings(tmp_path, sample)
    cfg = teach_config(finished.best_ckpt, tmp_path)
    train = finished.config()["train"]
    assert cfg.init_from == str(finished.best_ckpt.resolve())
    assert (cfg.hidden_size, cfg.num_layers, cfg.head) == (train["hidden_size"], train["num_layers"], train["head"])
    assert (cfg.seed, cfg.val_fraction, cfg.dataset) == (train["seed"], train["val_fraction"], train["dataset"])
    assert (cfg.my_drawings, cfg.epochs, cfg.lr) == (TEACH_DEFAULTS["my_drawings"], TEACH_DEFAULTS["epochs"],
                                                     TEACH_DEFAULTS["lr"])
    assert teach_config(finished.best_ckpt, tmp_path, epochs=1).epochs == 1


def test_teach_config_keeps_the_checkpoints_cell_and_direction(tmp_path, gru_one_way, sample):
    saved_drawings(tmp_path, sample)
    cfg = teach_config(gru_one_way.best_ckpt, tmp_path)
    assert (cfg.cell, cfg.bidirectional, cfg.head, cfg.hidden_size) == ("gru", False, "last", 8)


def test_teach_keeps_the_precision_its_checkpoint_trained_in(tmp_path, finished, sample, monkeypatch):
    saved_drawings(tmp_path, sample)
    payload = torch.load(finished.best_ckpt, weights_only=True)
    assert payload["train_config"]["amp"] == "off" and teach_config(finished.best_ckpt, tmp_path).amp == "off"

    def with_amp(amp: str | None) -> str:
        """The fine-tune's amp for a copy of the checkpoint that trained in `amp` (None: from before the setting)."""
        train = {k: v for k, v in payload["train_config"].items() if k != "amp"} | ({"amp": amp} if amp else {})
        path = tmp_path / f"{amp}.pt"
        torch.save({**payload, "train_config": train}, path)
        return teach_config(path, tmp_path).amp

    monkeypatch.setattr(devices, "cpu_has_bf16", lambda: True)
    assert with_amp(None) == "off"  # trained in fp32 before amp existed: not today's default, auto
    assert with_amp("bf16") == "bf16"
    monkeypatch.setattr(devices, "cpu_has_bf16", lambda: False)
    assert with_amp("bf16") == "auto"  # brought to a CPU without native bf16: what this one runs, not a refusal


def test_too_few_drawings_say_how_many_to_save(tmp_path, finished, sample):
    saved_drawings(tmp_path, sample, MIN_FOR_ACCURACY - 1)
    with pytest.raises(TeachError, match=f"save at least {MIN_FOR_ACCURACY}"):
        teach_config(finished.best_ckpt, tmp_path)


@pytest.mark.worker
def test_teach_command_reports_drawings_and_validation_before_and_after(tmp_path, finished, sample):
    runs_dir, data_dir = tmp_path / "runs", tmp_path / "data"
    saved_drawings(data_dir, sample)
    done = subprocess.run([sys.executable, "-m", "brnn_core", "teach", str(finished.best_ckpt), "--epochs", "1",
                           "--runs-dir", str(runs_dir), "--data-dir", str(data_dir)], capture_output=True, text=True,
                          cwd=REPO, env=cli_env(runs_dir, data_dir), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run,) = list_runs(runs_dir)
    report = json.loads((run.path / "report.json").read_text())
    drawings, validation = report["my_drawings"], report["validation"]
    assert drawings["held_out"] == 3 and drawings["before"] is not None and drawings["after"] is not None
    assert 0 < validation["before"] <= 1 and 0 < validation["after"] <= 1
    assert f"validation accuracy: {100 * validation['before']:.1f}% -> {100 * validation['after']:.1f}%" in done.stdout
    assert "held-out drawings:" in done.stdout and f"new checkpoint: {run.best_ckpt}" in done.stdout
    assert run.config()["train"]["init_from"] == str(finished.best_ckpt.resolve())


def test_teach_command_without_drawings_exits_2(brnn, tmp_path, finished):
    done = brnn(["teach", finished.best_ckpt, "--runs-dir", tmp_path / "runs", "--data-dir", tmp_path / "data"],
                tmp_path / "runs", tmp_path / "data")
    assert done.returncode == 2 and "0 drawings saved" in done.stderr and "Predict page" in done.stderr
    assert not (tmp_path / "runs").exists() or not list_runs(tmp_path / "runs")


@pytest.mark.worker
def test_teach_it_button_fine_tunes_and_picks_the_new_checkpoint(dirs, finished, sample):
    """From a session opened on Predict whose picker was used: the taught checkpoint is what the picker shows
    afterwards, the result stands beside the button, and its score counts only the drawings it never saw."""
    runs_dir, data_dir = dirs
    parent = copy_run(finished, runs_dir)
    at = build_app("pages/predict.py").run()
    button = next(b for b in at.button if b.label == "Teach it")
    assert button.disabled  # no drawings yet
    saved_drawings(data_dir, sample)
    held = sum(d.held_out for d in list_drawings(data_dir, MNIST_CLASSES).drawings)
    assert held > 0
    at.run()
    at.sidebar.selectbox(key="ckpt_choice").select(str(parent.best_ckpt.resolve())).run()
    button = next(b for b in at.button if b.label == "Teach it")
    assert not button.disabled
    assert any(f"shows before → after on the {held} held out" in c.value for c in at.caption), \
        [c.value for c in at.caption]  # said before the click
    button.click().run()
    no_exception(at)
    child = wait_for(lambda: next((r for r in list_runs(runs_dir) if r.id != parent.id), None), 30, "the teach run")
    assert child.config()["train"]["init_from"] == str(parent.best_ckpt.resolve())
    wait_for(lambda: Run(child.path).status().get("state") == "finished", 600, "the teach run to finish")
    deadline = time.time() + 60
    while at.session_state["ckpt_choice"] != str(child.best_ckpt.resolve()) and time.time() < deadline:
        at.run()  # the progress fragment notices the end, picks the new checkpoint and reruns the page
    no_exception(at)
    assert at.session_state["ckpt_choice"] == str(child.best_ckpt.resolve())
    assert any("Taught: now predicting with" in s.value and f"your {held} held-out drawings:" in s.value
               and "validation:" in s.value for s in at.success), [s.value for s in at.success]
    # did it forget a class? the per-class validation accuracy before -> after says
    assert any("most forgotten class:" in s.value or "no class lost more than" in s.value for s in at.success)
    validation = read_report(child)["validation"]
    assert len(validation["per_class_before"]) == len(validation["per_class_after"]) == 10
    at.run()  # the result stays beside the button on later reruns
    assert any("Taught: now predicting with" in s.value for s in at.success)
    # another checkpoint picked (as Open best in Predict does): the page no longer says it predicts with the taught one
    at.sidebar.selectbox(key="ckpt_choice").select(str(parent.best_ckpt.resolve())).run()
    assert not any("Taught" in s.value for s in at.success)
    at.sidebar.selectbox(key="ckpt_choice").select(str(child.best_ckpt.resolve())).run()
    # the taught checkpoint trained on the drawings: scored on the held-out ones only, and said so
    rerun_until(at, lambda a: any("drawings" in c.value for c in a.sidebar.caption), "the taught checkpoint's score")
    label = next(c.value for c in at.sidebar.caption if "drawings" in c.value)
    assert "held-out drawings" in label and f"({held})" in label and "my drawings" not in label, label
