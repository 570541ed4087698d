"""A run whose loss becomes NaN: it ends `diverged` with a hint, its last.pt still loads and predicts,
and the dashboard shows the message and stays up (test_divergence.py: the finite explosions)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import TINY, app_test, fake_finished_run, make_run, texts, torch_threads

from brnn_core.checkpoint import load_checkpoint
from brnn_core.inference.predictor import Predictor
from brnn_core.training.worker import train_run_dir


@pytest.mark.slow
def test_nan_loss_ends_diverged_with_a_hint_and_a_loadable_last_pt(tmp_path, monkeypatch, idx_data):
    """lr 10 with SGD and weight decay 1: the weights grow x9 a step until the loss is inf/NaN."""
    runs_dir = tmp_path / "runs"
    earlier = fake_finished_run(runs_dir)
    run = make_run(runs_dir, base=TINY, dataset="mnist", optimizer="sgd", lr=10.0, weight_decay=1.0, momentum=0.9,
                   batch_size=100, log_interval=40, epochs=3, input_scale="unit")
    # the blog's inputs, first log after the loss is NaN (step ~33); logged more often, the finite explosion
    # before it ends the run first (tests/test_divergence.py)
    with torch_threads(1):
        state = train_run_dir(run, data_dir=idx_data)
    status = run.status()
    assert state == "diverged" and status["state"] == "diverged", status
    assert "the loss became NaN or infinite" in status["message"]
    assert "Lower the learning rate (now 10)" in status["message"]
    assert any(e["kind"] == "diverged" for e in run.events())
    ckpt = load_checkpoint(run.last_ckpt)  # saved before the first step, never overwritten with inf
    assert all(torch.isfinite(t).all() for t in ckpt.model_state.values())
    assert ckpt.step < status["step"]
    drawing = np.zeros((280, 280, 4), np.uint8)
    drawing[40:240, 130:150] = 255
    probs = Predictor(ckpt).predict(drawing)
    assert np.isfinite(probs).all()

    at = app_test(monkeypatch, runs_dir, idx_data)
    at.query_params["run"] = run.id
    at.run()
    assert not at.exception, texts(at.exception)
    assert any("Lower the learning rate" in e for e in texts(at.error)), texts(at.error)
    assert any(run.id in m and "diverged" in m for m in texts(at.markdown))
    assert not next(b for b in at.button if b.label == "Start training").disabled
    for page in ("pages/runs.py", "pages/predict.py"):  # the other pages too
        at.switch_page(page).run()
        assert not at.exception, (page, texts(at.exception))
    assert earlier.status()["state"] == "finished"
