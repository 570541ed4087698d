"""The learning-rate schedule (brnn_core.schedule): its shape, and a real run following it through live changes,
a kill and a resume."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import make_run, steps_per_epoch, wait_for

from brnn_core.config import ConfigError, TrainConfig
from brnn_core.runs.progress import lr_plan
from brnn_core.schedule import FLOOR, WARMUP_START, lr_at, lr_factor, planned_lr
from brnn_core.training.recorder import Position
from brnn_core.training.session import TrainingSession
from brnn_core.training.worker import train_run_dir

RUN = {"dataset": "mnist-sample", "device": "cpu", "hidden_size": 8, "num_layers": 1, "batch_size": 500,
       "log_interval": 1, "eval_batch_size": 500, "augment": "off"}
SPE = steps_per_epoch(RUN["batch_size"])


def test_cosine_warms_up_then_decays_to_the_floor():
    total = 200
    f = [lr_factor("cosine", s, total) for s in range(total)]
    assert f[0] == pytest.approx(WARMUP_START)
    assert max(f) == pytest.approx(1.0) and f.index(max(f)) == 10  # warm-up: 5% of the planned steps
    assert all(a <= b for a, b in zip(f[:10], f[1:11], strict=True))  # rising during warm-up
    assert all(a >= b for a, b in zip(f[10:], f[11:], strict=False))  # then never rising again
    assert f[-1] == pytest.approx(FLOOR)
    assert lr_factor("cosine", 10_000, total) == pytest.approx(FLOOR)  # past the plan: stays at the floor
    assert {lr_factor("constant", s, total) for s in range(total)} == {1.0}
    assert lr_at("cosine", 0.01, 105, total) == pytest.approx(0.01 * f[105])


def test_the_schedule_is_a_checked_config_field():
    assert TrainConfig().lr_schedule == "cosine"
    with pytest.raises(ConfigError, match="lr_schedule"):
        TrainConfig(lr_schedule="linear").validate()


def test_the_plan_follows_live_changes_of_the_peak_and_the_epochs():
    steps, lrs = planned_lr("cosine", 0.01, 2, 50, [(40, "lr", 0.001), (60, "epochs", 4)])
    by_step = dict(zip(steps, lrs, strict=True))
    assert by_step[39] == pytest.approx(lr_at("cosine", 0.01, 39, 100))  # before: peak 0.01 over 100 steps
    assert by_step[40] == pytest.approx(lr_at("cosine", 0.001, 40, 100))  # a new peak rescales from its step
    assert by_step[60] == pytest.approx(lr_at("cosine", 0.001, 60, 200))  # 4 epochs: the decay is re-planned
    assert steps[-1] == 199 and lrs[-1] == pytest.approx(0.001 * FLOOR)
    # Nothing but those changes moves it: the same inputs, the same plan (a live chart is not redrawn)
    assert planned_lr("cosine", 0.01, 2, 50, [(40, "lr", 0.001), (60, "epochs", 4)]) == (steps, lrs)


def _train_lrs(run) -> dict[int, float]:
    m = run.metrics()
    train = m[m["split"] == "train"]
    return dict(zip(train["step"].astype(int), train["lr"], strict=True))


def test_live_changes_set_the_scheduled_lr_and_say_so(tmp_path):
    run = make_run(tmp_path / "runs", base=RUN, epochs=2, lr=0.01)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    cfg = TrainConfig.from_dict(run.config()["train"])
    session = TrainingSession(run, cfg, model, optimizer, classes=["a", "b"], steps_per_epoch=SPE,
                              start=Position(step=12))
    session.change("lr", 0.004, command="c1")
    assert optimizer.param_groups[0]["lr"] == pytest.approx(lr_at("cosine", 0.004, 12, 2 * SPE))
    session.change("epochs", 4, command="c2")
    assert optimizer.param_groups[0]["lr"] == pytest.approx(lr_at("cosine", 0.004, 12, 4 * SPE))
    first, second = [e for e in run.events() if e.get("kind") == "set"]
    assert first["message"].startswith("lr 0.01 -> 0.004 at step 12 (the schedule's peak; lr now ")
    assert second["message"].startswith("epochs 2 -> 4 at step 12 (schedule re-planned; lr ")


@pytest.mark.worker
def test_a_run_trains_with_the_scheduled_lr_and_the_chart_plan_matches_it(tmp_path):
    run = make_run(tmp_path / "runs", base=RUN, epochs=2, lr=0.01)
    assert train_run_dir(run, data_dir=tmp_path) == "finished"
    lrs = _train_lrs(run)
    total = 2 * SPE
    # the lr logged at a step is the one its optimizer step used: step s was logged after step s-1 ran
    for step, lr in lrs.items():
        assert lr == pytest.approx(lr_at("cosine", 0.01, step - 1, total), rel=1e-5), step  # csv: 6 digits
    steps, planned = lr_plan(run.config(), run.status(), run.events())
    assert dict(zip(steps, planned, strict=True))[total - 1] == pytest.approx(0.01 * FLOOR)


@pytest.mark.worker
def test_constant_keeps_the_blog_lr(tmp_path):
    run = make_run(tmp_path / "runs", base=RUN, epochs=1, lr=0.01, lr_schedule="constant")
    assert train_run_dir(run, data_dir=tmp_path) == "finished"
    assert set(_train_lrs(run).values()) == {0.01}


@pytest.mark.worker
def test_a_live_lr_change_rescales_the_schedule_and_a_resume_continues_it(tmp_path):
    runs = tmp_path / "runs"
    run = make_run(runs, base=RUN, epochs=2, lr=0.01)
    run.send_command("set", field="lr", value=0.002)  # applied before the first step
    run.send_command("set", field="epochs", value=3)
    stop_at = SPE + 3

    def after_epoch(epoch, metrics):  # stop mid-way through the second epoch, as a user would
        run.send_command("stop")

    assert train_run_dir(run, data_dir=tmp_path, after_epoch=after_epoch) == "stopped"
    assert run.status()["step"] <= stop_at
    assert train_run_dir(run, data_dir=tmp_path, resume=True) == "finished"
    lrs = _train_lrs(run)
    total = 3 * SPE
    assert sorted(lrs) == list(range(1, total + 1))  # no step twice, none missing
    for step, lr in lrs.items():
        assert lr == pytest.approx(lr_at("cosine", 0.002, step - 1, total), rel=1e-5), step  # resumed too
    sets = [e for e in run.events() if e.get("kind") == "set"]
    assert sets[0]["old"] == 0.01 and sets[0]["new"] == 0.002 and "the schedule's peak" in sets[0]["message"]
    assert sets[1]["field"] == "epochs" and sets[1]["new"] == 3
    wait_for(lambda: run.status()["state"] == "finished", 5, "the final status")
    assert math.isclose(run.status()["live"]["lr"], 0.002)
