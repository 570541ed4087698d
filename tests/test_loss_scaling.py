"""fp16 loss scaling: skipped steps are counted and reported, its state survives a checkpoint and a resume.

fp16 autocast runs here on the CPU through ATen's own LSTM (oneDNN has no fp16 LSTM on most CPUs), so
this is the GradScaler code path CUDA runs. Overflow is provoked with a loss scale far above fp16's range.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import make_run

from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.training.engine import fit, grad_scaler, make_optimizer, train_one_epoch
from brnn_core.training.loss_scaling import STUCK_WINDOW, LossScaler
from brnn_core.training.recorder import Position
from brnn_core.training.session import TrainingSession
from brnn_core.training.warmstart import restore

CPU = torch.device("cpu")


def aten_lstm():
    """fp16 on the CPU needs ATen's LSTM (allow_tf32=None: leave that setting alone)."""
    return torch.backends.mkldnn.flags(enabled=False, allow_tf32=None)


def tiny(seed: int = 0) -> RecurrentClassifier:
    torch.manual_seed(seed)
    return RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1))


def data(sample, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return sample.train_x[:n], sample.train_y[:n]


def test_grad_scaler_is_a_counting_loss_scaler_for_fp16_only():
    assert isinstance(grad_scaler(CPU, "fp16"), LossScaler)
    assert grad_scaler(CPU, "bf16") is None and grad_scaler(CPU, "off") is None


def test_overflow_skips_are_counted(sample):
    """Started at 2**40 the scaled gradients overflow fp16 until the scale has halved down into its range:
    every halving is one skipped step, and the steps after it update the weights."""
    model = tiny()
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    scaler = LossScaler("cpu", init_scale=2.0**40)
    x, y = data(sample, 400)
    with aten_lstm():
        result = train_one_epoch(model, opt, x, y, torch.arange(400).split(10), amp="fp16", scaler=scaler,
                                 log_interval=10)
    assert result.completed and not result.diverged and result.step == 40
    halvings = round(math.log2(2.0**40 / scaler.get_scale()))
    skipped = scaler.skipped_steps()
    assert 10 <= skipped < 40 and skipped == halvings, (skipped, scaler.get_scale())
    assert scaler.steps == 40 and scaler.recent(window=1000) == (skipped, 40)
    # steps after the scale came into range were taken: Adam moved the weights
    assert opt.state[next(model.parameters())]["step"].item() == 40 - skipped


def test_a_run_that_skips_most_steps_ends_diverged_and_says_why(sample, runs_dir):
    """A scale that backs off by only 1% per overflow stays far above fp16's range: every step is skipped.
    The recorder warns in the event log, fit ends the run as diverged, and the message names the cause."""
    run = make_run(runs_dir, dataset="mnist-sample", device="cpu", hidden_size=8, num_layers=1, epochs=5,
                   batch_size=10, log_interval=10)
    cfg = TrainConfig.from_dict(run.config()["train"])
    model = tiny()
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    scaler = LossScaler("cpu", init_scale=2.0**60, backoff_factor=0.99)
    rec = TrainingSession(run, cfg, model, opt, classes=sample.classes, start=Position(), steps_per_epoch=30,
                          scaler=scaler)
    x, y = data(sample, 300)
    with aten_lstm():
        result = fit(model, opt, x, y, x[:50], y[:50], epochs=5, batch_size=10, seed=0, log_interval=10,
                     amp="fp16", hooks=rec.hooks(), scaler=scaler)
    assert result.state == "diverged" and result.step == STUCK_WINDOW  # the first log point with a full window
    assert scaler.skipped_steps() == STUCK_WINDOW  # every single step
    warnings = [e for e in run.events() if e["kind"] == "warning"]
    assert len(warnings) == 1 and "skipped 10 of the last 10 steps" in warnings[0]["message"]
    # written while it trained: with the last logged point before the end (step 90), or by a heartbeat after it
    # when the machine is slow enough that a second passes meanwhile; never the end's count yet
    assert 90 <= run.status()["skipped_steps"] < STUCK_WINDOW
    rec.end_diverged(result)
    status = run.status()
    assert status["state"] == "diverged" and status["skipped_steps"] == STUCK_WINDOW
    assert f"fp16 loss scaling skipped {STUCK_WINDOW} of the last {STUCK_WINDOW} steps" in status["message"]
    assert "amp=bf16" in status["message"]


@pytest.mark.slow
def test_grad_scaler_state_round_trips_through_a_checkpoint(sample, runs_dir):
    """last.pt carries the loss scale, growth tracker and skip count; a resumed run continues from them."""
    run = make_run(runs_dir, dataset="mnist-sample", device="cpu", hidden_size=8, num_layers=1, epochs=1)
    cfg = TrainConfig.from_dict(run.config()["train"])
    model = tiny()
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    scaler = LossScaler("cpu", init_scale=2.0**24, growth_interval=7)
    x, y = data(sample, 300)
    with aten_lstm():
        first = train_one_epoch(model, opt, x, y, torch.arange(300).split(10), amp="fp16", scaler=scaler)
    rec = TrainingSession(run, cfg, model, opt, classes=sample.classes, start=Position(0, 30, first.step),
                          steps_per_epoch=30, scaler=scaler)
    rec.save_last()
    saved = scaler.state_dict()
    assert saved["skipped_steps"] > 0 and saved["steps"] == 30 and saved["scale"] != 2.0**24, saved
    assert load_checkpoint(run.last_ckpt).scaler_state == saved

    model2 = tiny(seed=1)
    opt2 = make_optimizer(model2.parameters(), "adam", 0.01)
    fresh = LossScaler("cpu")  # as the worker makes it before restoring
    position, _ = restore(run, model2, opt2, scaler=fresh)
    assert position.step == first.step and fresh.state_dict() == saved
    assert fresh.get_scale() == scaler.get_scale() and fresh.skipped_steps() == scaler.skipped_steps()
    with aten_lstm():  # both go on alike from the same state
        for s in (scaler, fresh):
            train_one_epoch(model2 if s is fresh else model, opt2 if s is fresh else opt, x, y,
                            torch.arange(100).split(10), amp="fp16", scaler=s)
    assert fresh.state_dict() == scaler.state_dict() and fresh.steps == 40
