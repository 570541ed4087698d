"""A loss that explodes but stays finite is a diverged run too (engine.ExplosionWatch).

SGD at lr=10 takes a model's loss from 2.3 to hundreds within a few steps while every number stays finite; before,
such a run ended "finished" at chance accuracy. Real short runs: the session's diverging run (conftest's
`diverged`), the session's good epoch (`finished`) exploding on resume, a noisy healthy run.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import STEPS_PER_EPOCH, copy_run, train_run

from brnn_core.checkpoint import load_checkpoint
from brnn_core.training.engine import EXPLODED_FACTOR, EXPLODED_LOGS, ExplosionWatch
from brnn_core.training.worker import train_run_dir

LIMIT = EXPLODED_FACTOR * math.log(10)  # 23.0 for ten classes


def test_watch_needs_several_exploded_logs_in_a_row():
    watch = ExplosionWatch()
    assert watch.limit(10) == LIMIT and EXPLODED_LOGS >= 2
    spikes = [2.3, LIMIT + 1] * 5 + [2.3] + [LIMIT * 2] * (EXPLODED_LOGS - 1) + [1.0]  # isolated and short bursts
    assert [watch.observe(loss, 10) for loss in spikes] == [""] * len(spikes)
    reasons = [watch.observe(LIMIT + 5, 10) for _ in range(EXPLODED_LOGS)]
    assert reasons[:-1] == [""] * (EXPLODED_LOGS - 1)
    assert reasons[-1] == (f"the training loss stayed above 23.0 (10x the 2.30 of guessing at random) for "
                           f"{EXPLODED_LOGS} logs in a row (last {LIMIT + 5:.4g})")
    assert ExplosionWatch().limit(2) == EXPLODED_FACTOR * math.log(2)  # relative to the classes there are


def test_a_finite_explosion_ends_diverged_with_what_to_change(diverged):
    """The session's diverging run (conftest): its logged losses explode and stay finite; the watch ends it."""
    run = diverged
    status = run.status()
    assert status["state"] == "diverged", status
    train = run.metrics().query("split == 'train'")
    losses = train["loss"].tolist()
    assert all(math.isfinite(v) for v in losses) and max(losses) > 100  # finite, and far above ln(10)
    assert sum(v > LIMIT for v in losses[-EXPLODED_LOGS:]) == EXPLODED_LOGS
    assert run.metrics().query("split != 'train'").empty  # stopped mid-epoch 1: no validation, no test report
    message = status["message"]
    assert message.startswith(f"diverged at step {status['step']}: the training loss stayed above 23.0")
    assert "Lower the learning rate (now 10), weight decay (now 1) or turn on gradient clipping" in message
    assert "last.pt holds only the untrained starting weights" in message
    start = load_checkpoint(run.last_ckpt)  # saved when training started, never overwritten after
    assert (start.epoch, start.step) == (0, 0) and not run.best_ckpt.exists()
    [event] = [e for e in run.events() if e["kind"] == "diverged"]
    assert event["message"] == message


def test_explosion_after_a_good_epoch_keeps_that_epochs_checkpoints(finished, tmp_path):
    run = copy_run(finished, tmp_path / "runs")  # one good epoch at a constant lr (conftest's `finished`)
    good = load_checkpoint(run.last_ckpt)
    assert good.step == STEPS_PER_EPOCH and good.metrics["val_acc"] > 0.2  # learnt something (chance is 0.1)
    run.send_command("set", field="epochs", value=2)
    run.send_command("set", field="lr", value=10.0)  # the user raises lr far too high and resumes
    assert train_run_dir(run, data_dir=finished.path.parents[1] / "data", resume=True) == "diverged"
    message = run.status()["message"]
    # either check may catch it first: the logged training loss or the epoch's validation loss, far above guessing
    assert ("the training loss stayed above 23.0" in message or "is above 23.0" in message) and "(now 10)" in message
    assert "last.pt and best.pt hold the last good weights saved before it diverged" in message
    for path in (run.last_ckpt, run.best_ckpt):
        kept = load_checkpoint(path)
        assert kept.step == STEPS_PER_EPOCH and kept.metrics["val_acc"] == good.metrics["val_acc"]
        assert all(torch.equal(kept.model_state[k], good.model_state[k]) for k in good.model_state)
    after = run.metrics().query(f"split == 'train' and step > {STEPS_PER_EPOCH}")
    assert after["loss"].max() > 10 * LIMIT / EXPLODED_FACTOR


@pytest.mark.slow
def test_a_noisy_healthy_run_does_not_trip_it(tmp_path):
    """Batches of 8 and a log every step: the noisiest loss curve the config allows, and it still learns."""
    run, state = train_run(tmp_path / "runs", tmp_path / "data", hidden_size=32, batch_size=8, log_interval=1,
                           epochs=1, lr=0.01, augment="strong")
    assert state == "finished", run.status()
    losses = run.metrics().query("split == 'train'")["loss"]
    late = losses.tail(100)
    assert len(losses) == 507 and late.std() > 0.2 * late.median()  # noisy: one batch of 8 per point
    assert late.max() > 1.5 * late.median() and losses.max() > 2 * late.median()  # with spikes
    assert losses.max() < LIMIT
    assert run.status()["test_acc"] > 0.5
