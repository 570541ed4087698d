"""Recording a run as it trains: the training session's fit hooks (training/session.py) and its Recorder
(training/recorder.py), which writes the rows and checkpoints.

The hooks are called here the way `engine.fit` calls them, with chosen losses, so every row, status field
and checkpoint can be checked to the number; the last tests run them inside a real tiny training run.
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from helpers import TINY, make_run
from helpers import TINY_STEPS_PER_EPOCH as SPE

from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.data.datasets import MNIST_CLASSES
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.runs.rundir import Run
from brnn_core.training import recorder as recorder_module
from brnn_core.training.engine import EpochResult, EvalResult, LogPoint, make_optimizer
from brnn_core.training.recorder import CHECKPOINT_EVERY_S, Position
from brnn_core.training.session import TrainingSession
from brnn_core.training.worker import train_run_dir

RUN = {**TINY, "epochs": 3, "augment": "off", "lr_schedule": "constant"}


@pytest.fixture
def run(runs_dir) -> Run:
    return make_run(runs_dir, base=RUN)


def recorder(run: Run, start: Position | None = None) -> tuple[TrainingSession, list[tuple[str, dict]]]:
    """A training session on a fresh hidden-8 model, as the worker builds it; and what it printed."""
    cfg = TrainConfig.from_dict(run.config()["train"])
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1))
    optimizer = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    printed: list[tuple[str, dict]] = []
    rec = TrainingSession(run, cfg, model, optimizer, classes=MNIST_CLASSES, start=start or Position(),
                          steps_per_epoch=SPE, printer=lambda kind, info: printed.append((kind, info)))
    return rec, printed


def epoch_end(rec: TrainingSession, epoch: int, val_loss: float, val_acc: float, train_loss: float) -> None:
    """What fit reports after validating epoch `epoch` (1-based: epochs completed)."""
    empty = torch.zeros(0)
    rec.on_epoch_end(epoch, EpochResult(epoch * SPE, SPE, train_loss, True),
                     EvalResult(val_loss, val_acc, empty.long(), empty.view(0, 10)))


def nudge(model: torch.nn.Module) -> None:
    """Change the weights, as a training step would."""
    with torch.no_grad():
        model.fc.weight.add_(0.5)


def metric_rows(run: Run) -> list[str]:
    return run.metrics_path.read_text().splitlines()[1:]


# ------------------------------------------------------------------ logs
def test_a_log_writes_a_train_row_and_the_progress_in_status(run):
    rec, printed = recorder(run)
    rec.on_log(1, LogPoint(step=11, batch=3, loss=2.25, samples_per_s=1000.0, lr=0.01))
    [row] = metric_rows(run)
    step, epoch, split, loss, accuracy, lr, speed, elapsed = row.split(",")
    assert (step, epoch, split, loss, accuracy, lr, speed) == ("11", "1.375", "train", "2.25", "", "0.01", "1000")
    assert 0 <= float(elapsed) < 60
    status = run.stored_status()
    assert (status["state"], status["message"], status["step"], status["loss"]) == ("running", "epoch 2/3", 11, 2.25)
    assert (status["epoch"], status["batch"], status["steps_done"], status["total_steps"]) == (1, 3, 11, 3 * SPE)
    assert status["steps_per_epoch"] == SPE and status["samples_per_s"] == 1000.0
    assert status["live"] == {"lr": 0.01, "grad_clip": 0.0, "epochs": 3, "augment": "off"}
    assert time.time() - status["heartbeat"] < 60
    assert [kind for kind, _ in printed] == ["log"] and printed[0][1]["step"] == 11
    assert not run.last_ckpt.exists()  # saved only every CHECKPOINT_EVERY_S mid-epoch


def test_elapsed_time_continues_from_earlier_workers_of_the_run(run):
    run.write_status(elapsed_s=100.0)  # an earlier worker trained for 100 s before it was stopped
    rec, _ = recorder(run)
    rec.on_log(0, LogPoint(step=2, batch=2, loss=2.3, samples_per_s=900.0, lr=0.01))
    assert 100.0 <= float(metric_rows(run)[0].split(",")[-1]) < 160
    assert 100.0 <= run.stored_status()["elapsed_s"] < 160


# ------------------------------------------------------------------ mid-epoch checkpoints
def test_last_pt_is_saved_mid_epoch_every_checkpoint_interval(run):
    rec, _ = recorder(run)
    rec.recorder.last_save = time.perf_counter() - CHECKPOINT_EVERY_S - 1  # the last save is older than the interval
    rec.on_log(1, LogPoint(step=11, batch=3, loss=2.2, samples_per_s=900.0, lr=0.01))
    last = load_checkpoint(run.last_ckpt)
    assert (last.epoch, last.batch_in_epoch, last.step) == (1, 3, 11)  # a resume replays the rest of epoch 2
    assert last.optimizer_state is not None and last.train_config["live"]["epochs"] == 3
    assert torch.equal(last.model_state["fc.weight"], rec.model.fc.weight)
    saved = run.last_ckpt.stat().st_mtime_ns
    rec.on_log(1, LogPoint(step=12, batch=4, loss=2.1, samples_per_s=900.0, lr=0.01))
    assert run.last_ckpt.stat().st_mtime_ns == saved  # just saved: not again until the interval has passed


@pytest.mark.parametrize("why", ["exploding", "inf-weights"])
def test_weights_that_are_blowing_up_are_never_saved(run, why):
    rec, _ = recorder(run)
    rec.save_last()
    good = load_checkpoint(run.last_ckpt)
    rec.recorder.last_save = time.perf_counter() - CHECKPOINT_EVERY_S - 1
    if why == "inf-weights":
        with torch.no_grad():
            rec.model.fc.weight[0, 0] = math.inf
    rec.on_log(0, LogPoint(step=3, batch=3, loss=50.0, samples_per_s=900.0, lr=0.01, exploding=why == "exploding"))
    kept = load_checkpoint(run.last_ckpt)
    assert kept.step == 0 and torch.equal(kept.model_state["fc.weight"], good.model_state["fc.weight"])
    assert len(metric_rows(run)) == 1  # the loss is still logged


# ------------------------------------------------------------------ epochs: last.pt, best.pt
def test_each_epoch_saves_last_pt_and_best_pt_keeps_the_lowest_validation_loss(run):
    rec, printed = recorder(run)
    reported: list[tuple[int, dict]] = []
    rec.after_epoch = lambda epoch, metrics: reported.append((epoch, metrics))
    weights = {}
    for epoch, val_loss in ((1, 2.0), (2, 1.5), (3, 1.8)):
        nudge(rec.model)
        weights[epoch] = rec.model.fc.weight.detach().clone()
        epoch_end(rec, epoch, val_loss, val_acc=0.1 * epoch, train_loss=2.5 - 0.1 * epoch)
        last = load_checkpoint(run.last_ckpt)
        assert (last.epoch, last.step, last.batch_in_epoch) == (epoch, epoch * SPE, 0)
        assert last.metrics["val_loss"] == pytest.approx(val_loss) and last.optimizer_state is not None
        assert torch.equal(last.model_state["fc.weight"], weights[epoch])
    best = load_checkpoint(run.best_ckpt)
    assert (best.epoch, best.step, best.metrics["val_loss"]) == (2, 2 * SPE, pytest.approx(1.5))
    assert torch.equal(best.model_state["fc.weight"], weights[2])  # epoch 3 was worse: not saved over it
    assert best.optimizer_state is None  # best.pt is for predictions: weights only
    assert rec.position.best_val == pytest.approx(1.5)

    val = run.metrics().query("split == 'val'")
    assert list(val.step) == [SPE, 2 * SPE, 3 * SPE] and list(val.epoch) == [1, 2, 3]
    assert list(val.loss) == pytest.approx([2.0, 1.5, 1.8]) and list(val.accuracy) == pytest.approx([0.1, 0.2, 0.3])
    assert (val.lr == 0.01).all()
    assert [e["message"] for e in run.events()] == [
        "epoch 1: train loss 2.4000, val loss 2.0000, val acc 10.00%",
        "epoch 2: train loss 2.3000, val loss 1.5000, val acc 20.00%",
        "epoch 3: train loss 2.2000, val loss 1.8000, val acc 30.00%"]
    status = run.stored_status()
    assert (status["step"], status["val_loss"], status["steps_done"]) == (3 * SPE, 1.8, 3 * SPE)
    assert status["val_acc"] == pytest.approx(0.3)
    assert [epoch for epoch, _ in reported] == [1, 2, 3]
    assert reported[1][1] == {"val_loss": 1.5, "val_acc": 0.2, "train_loss": pytest.approx(2.3)}
    assert [kind for kind, _ in printed] == ["epoch"] * 3


def test_a_resumed_recorder_only_replaces_best_pt_with_a_better_epoch(run):
    rec, _ = recorder(run)
    epoch_end(rec, 1, 1.2, val_acc=0.6, train_loss=1.3)
    first_best = run.best_ckpt.read_bytes()
    resumed, _ = recorder(run, start=Position(epoch=1, step=SPE, best_val=1.2))  # restore() reads best_val
    nudge(resumed.model)
    epoch_end(resumed, 2, 1.3, val_acc=0.5, train_loss=1.2)
    assert run.best_ckpt.read_bytes() == first_best and load_checkpoint(run.last_ckpt).epoch == 2
    epoch_end(resumed, 3, 1.1, val_acc=0.7, train_loss=1.1)
    assert load_checkpoint(run.best_ckpt).epoch == 3 and resumed.position.best_val == pytest.approx(1.1)


# ------------------------------------------------------------------ inside a real run
def test_a_real_run_leaves_the_rows_and_checkpoints_the_recorder_promises(run):
    assert train_run_dir(run, data_dir=run.path.parent) == "finished"
    metrics = run.metrics()
    train, val = metrics.query("split == 'train'"), metrics.query("split == 'val'")
    assert list(train.step) == list(range(1, 3 * SPE + 1)) and list(val.step) == [SPE, 2 * SPE, 3 * SPE]
    assert list(train.epoch[:2]) == [1 / SPE, 2 / SPE] and (train.lr == 0.01).all()
    best_epoch = int(val.epoch[val.loss.idxmin()])
    best = load_checkpoint(run.best_ckpt)
    assert best.epoch == best_epoch and best.metrics["val_loss"] == pytest.approx(val.loss.min(), rel=1e-5)
    last = load_checkpoint(run.last_ckpt)
    assert (last.epoch, last.step, last.batch_in_epoch) == (3, 3 * SPE, 0)
    assert last.metrics["val_loss"] == pytest.approx(val.loss.iloc[-1], rel=1e-5)
    assert last.train_config["live"] == {"lr": 0.01, "grad_clip": 0.0, "epochs": 3, "augment": "off"}
    status = run.status()
    assert (status["steps_done"], status["total_steps"], status["epoch"], status["batch"]) == (3 * SPE, 3 * SPE, 3, 0)
    assert status["val_loss"] == pytest.approx(val.loss.iloc[-1], rel=1e-5)


def test_a_real_run_saves_mid_epoch_when_the_interval_has_passed(run, monkeypatch):
    monkeypatch.setattr(recorder_module, "CHECKPOINT_EVERY_S", 0.0)  # every log is past the interval
    seen: list[tuple[int, int, int]] = []

    def look(kind: str, info: dict) -> None:  # printed before that log's save: last.pt is the previous log's
        if kind == "log" and info["step"] in (5, SPE + 5):
            ckpt = load_checkpoint(run.last_ckpt)
            seen.append((ckpt.epoch, ckpt.batch_in_epoch, ckpt.step))

    assert train_run_dir(run, data_dir=run.path.parent, printer=look) == "finished"
    assert seen == [(0, 4, 4), (1, 4, SPE + 4)]


def test_best_by_val_accuracy_keeps_the_most_accurate_epoch(runs_dir):
    run = make_run(runs_dir, base={**RUN, "best_by": "val_accuracy"})
    rec, _ = recorder(run)
    weights = {}
    for epoch, (val_loss, val_acc) in enumerate(((2.0, 0.5), (1.5, 0.4), (1.8, 0.7)), start=1):
        nudge(rec.model)
        weights[epoch] = rec.model.fc.weight.detach().clone()
        epoch_end(rec, epoch, val_loss, val_acc=val_acc, train_loss=2.0)
    best = load_checkpoint(run.best_ckpt)
    assert best.epoch == 3 and best.metrics["val_acc"] == pytest.approx(0.7)  # not epoch 2's lower loss
    assert torch.equal(best.model_state["fc.weight"], weights[3])
