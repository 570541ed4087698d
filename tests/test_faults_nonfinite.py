"""A checkpoint whose weights hold NaN or infinity is refused wherever a checkpoint is read (evaluate, predict,
teach, a branch, a resume, init_from, the Predictor and the Predict page, uploads, the Inside page's training
states), naming the file and the fix; and a run stopped right after its weights blew up ends `diverged`, keeping the
last good last.pt, which a resume with a lower lr continues from (docs/run-directory.md, "Diverged runs")."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import TINY, app_test, copy_run, make_run, no_exception, texts, torch_threads

from brnn_core import cli
from brnn_core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from brnn_core.inference.predictor import Predictor
from brnn_core.inference.state_space import build_for_checkpoint
from brnn_core.training.engine import weights_finite
from brnn_core.training.worker import train_run_dir

SAYS = "refused, its weights hold NaN or infinite values"


def poisoned(source, target) -> None:
    """`source`'s checkpoint saved as `target` with NaN in one tensor and inf in another."""
    ckpt = load_checkpoint(source)
    model = ckpt.build_model()
    with torch.no_grad():
        model.fc.weight[0, 0] = float("nan")
        model.lstm.weight_hh_l0[1, 1] = float("inf")
    save_checkpoint(target, model, classes=ckpt.classes, train_config=ckpt.train_config, epoch=ckpt.epoch,
                    step=ckpt.step, metrics=ckpt.metrics)


@pytest.fixture
def nan_run(tmp_path, finished):
    """A copy of the finished run whose best.pt and last.pt hold NaN and inf weights (status: stopped)."""
    run = copy_run(finished, tmp_path / "runs")
    for path in (run.best_ckpt, run.last_ckpt):
        poisoned(finished.best_ckpt, path)
    run.write_status(state="stopped", message="stopped at step 8, checkpoint saved")
    return run


def test_every_command_refuses_it_naming_the_file(nan_run, tmp_path, capsys, digit_png):
    runs_dir, data_dir = nan_run.path.parent, tmp_path / "data"
    before = nan_run.status_path.read_bytes()
    commands = [["evaluate", nan_run.best_ckpt, "--dataset", "mnist-sample", "--data-dir", data_dir],
                ["predict", nan_run.best_ckpt, digit_png],
                ["teach", nan_run.best_ckpt, "--runs-dir", runs_dir, "--data-dir", data_dir],
                ["train", "--runs-dir", runs_dir, "--data-dir", data_dir, "--set", f"init_from={nan_run.best_ckpt}",
                 "--set", "hidden_size=16", "--set", "num_layers=1"],
                ["train", "--runs-dir", runs_dir, "--data-dir", data_dir, "--from", nan_run.id],
                ["train", "--runs-dir", runs_dir, "--data-dir", data_dir, "--from", f"{nan_run.id}:best"],
                ["train", "--runs-dir", runs_dir, "--data-dir", data_dir, "--resume", nan_run.id]]
    for args in commands:
        assert cli.main([str(a) for a in args]) == 2, args
        err = capsys.readouterr().err
        assert "checkpoints/" in err and SAYS in err and "lower learning rate" in err, (args, err)
        assert "Traceback" not in err
    assert [p.name for p in runs_dir.iterdir()] == [nan_run.id]  # no run was created
    assert nan_run.status_path.read_bytes() == before  # the resume changed nothing


def test_the_library_refuses_it_everywhere_it_reads_one(nan_run, tmp_path):
    for read in (lambda: load_checkpoint(nan_run.best_ckpt), lambda: Predictor.from_checkpoint(nan_run.best_ckpt),
                 lambda: load_checkpoint(nan_run.best_ckpt.read_bytes()),  # an upload's bytes
                 lambda: build_for_checkpoint(nan_run.best_ckpt, tmp_path / "data")):
        with pytest.raises(CheckpointError, match=SAYS):
            read()
    bare = tmp_path / "model.ckpt"  # the blog's kind: a bare state_dict
    torch.save(torch.load(nan_run.best_ckpt, weights_only=True)["model_state"], bare)
    with pytest.raises(CheckpointError, match=f"{bare}: {SAYS}"):
        load_checkpoint(bare)


def test_the_predict_page_says_why_it_cannot_be_used(nan_run, monkeypatch):
    at = app_test(monkeypatch, nan_run.path.parent, page="pages/predict.py")
    at.run()
    no_exception(at)
    assert any("This checkpoint cannot be used" in e and SAYS in e for e in texts(at.error)), texts(at.error)


@pytest.mark.slow
def test_a_stop_after_the_weights_blew_up_keeps_the_last_good_last_pt(tmp_path, idx_data):
    """SGD at lr 10 with weight decay 1 (the weights grow x9 a step) and no log within the epoch: a stop that
    arrives the first step the weights are no longer finite ends the run diverged, never saving them; a resume
    at a sane lr continues from the last good last.pt."""
    run = make_run(tmp_path / "runs", base=TINY, dataset="mnist", optimizer="sgd", lr=10.0, weight_decay=1.0,
                   momentum=0.9, batch_size=20, log_interval=100000, epochs=2, input_scale="unit", augment="off",
                   drawn_share=0.0, lr_schedule="constant")
    stopped_at = []

    def before_start(session) -> None:
        step_once = session.before_step

        def before_step(step: int) -> bool:  # a user clicks Stop just after the blow-up, before any log
            if not stopped_at and not weights_finite(session.model):
                stopped_at.append(step)
                session.run.send_command("stop")
            return step_once(step)

        session.before_step = before_step

    with torch_threads(1):
        state = train_run_dir(run, data_dir=idx_data, before_start=before_start)
    status = run.status()
    assert stopped_at and state == "diverged" and status["state"] == "diverged", (stopped_at, status)
    assert status["message"].startswith(f"diverged at step {stopped_at[0]}: the weights became NaN or infinite")
    assert "Lower the learning rate (now 10)" in status["message"]
    kept = load_checkpoint(run.last_ckpt)  # finite (it loads), saved before the first step
    assert kept.step == 0
    run.send_command("set", field="lr", value=0.01)  # what the message says to do, then resume
    with torch_threads(1):
        assert train_run_dir(run, data_dir=idx_data, resume=True) == "finished", run.status()
    assert json.loads(run.status_path.read_text())["test_acc"] > 0.1
