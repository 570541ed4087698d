"""Every way a run starts from a checkpoint (training/warmstart.py), on real checkpoints of tiny real runs.

`choose_start` picks the start: fresh, `init_from` (weights only, step 0), a branch's first start (its parent's
checkpoint), a resume from the run's own last.pt, or `resume_from` another checkpoint (PBT's exploit). All go
through `start_from_checkpoint`, whose trap is the optimizer state: loading it brings back the hyperparameters
it was saved with, so the wanted values must be put back afterwards (the lr by the training session, which
these tests build as the worker does). Branches end to end (CLI, chains): test_branch.py.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import TINY, copy_run, make_run, stop_at
from helpers import TINY_STEPS_PER_EPOCH as SPE

from brnn_core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.data.datasets import MNIST_CLASSES
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.runs.branch import PARENT_CKPT, create_branch
from brnn_core.runs.progress import progress_text
from brnn_core.runs.rundir import Run
from brnn_core.training.commands import LiveSettings
from brnn_core.training.engine import make_optimizer
from brnn_core.training.recorder import Position
from brnn_core.training.session import TrainingSession
from brnn_core.training.warmstart import choose_start, drop_metrics_after, drop_start_copy, start_from_checkpoint
from brnn_core.training.worker import train_run_dir

RUN = {**TINY, "epochs": 2, "augment": "off", "lr_schedule": "constant", "seed": 3}


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Run:
    """A finished 2-epoch run: last.pt at step 2 * SPE with its Adam state, best.pt (weights only)."""
    runs_dir = tmp_path_factory.mktemp("warmstart") / "runs"
    run = make_run(runs_dir, base=RUN)
    assert train_run_dir(run, data_dir=runs_dir) == "finished"
    return run


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Run:
    """A run stopped mid-epoch 2 (step 11 = epoch 1 + 3 batches) after live changes of lr and grad_clip."""
    runs_dir = tmp_path_factory.mktemp("warmstart-stopped") / "runs"
    run = make_run(runs_dir, base=RUN)
    stop = stop_at(run, 11)

    def steer(kind: str, info: dict) -> None:
        if kind == "log" and info["step"] == 9:
            run.send_command("set", field="lr", value=0.003)
            run.send_command("set", field="grad_clip", value=2.0)
        stop(kind, info)

    assert train_run_dir(run, data_dir=runs_dir, printer=steer) == "stopped"
    return run


@dataclass
class Start:
    position: Position
    note: str | None
    model: RecurrentClassifier
    optimizer: torch.optim.Optimizer
    settings: dict


def begin(run: Run, *, resume: bool = False, resume_from: Path | None = None) -> Start:
    """choose_start with the model and optimizer the worker builds from the run's config, then its session."""
    cfg = TrainConfig.from_dict(run.config()["train"])
    torch.manual_seed(cfg.seed)
    model = RecurrentClassifier(ModelConfig(hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, head=cfg.head))
    optimizer = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.momentum)
    began = choose_start(run, cfg, model, optimizer, MNIST_CLASSES, resume=resume, resume_from=resume_from)
    session = TrainingSession(run, cfg, model, optimizer, classes=MNIST_CLASSES, steps_per_epoch=SPE,
                              start=began.position, live=LiveSettings.of(cfg).with_saved(began.live))
    return Start(began.position, began.note, model, optimizer, session.live.to_dict())


def same_weights(model: torch.nn.Module, path: Path) -> bool:
    saved = load_checkpoint(path).model_state
    return all(torch.equal(tensor, saved[name]) for name, tensor in model.state_dict().items())


def adam_moments(optimizer: torch.optim.Optimizer) -> torch.Tensor:
    return optimizer.state[optimizer.param_groups[0]["params"][0]]["exp_avg"]


def hidden_8(seed: int = 0, **kw) -> RecurrentClassifier:
    torch.manual_seed(seed)  # the architecture of RUN
    return RecurrentClassifier(ModelConfig(**{"hidden_size": 8, "num_layers": 1, "input_scale": "standard", **kw}))


# ------------------------------------------------------------------ choose_start: which start
def test_a_new_run_starts_fresh(runs_dir):
    run = make_run(runs_dir, base=RUN)
    start = begin(run)
    assert (start.position, start.note) == (Position(), None)
    untrained = hidden_8(RUN["seed"])
    assert all(torch.equal(t, untrained.state_dict()[k]) for k, t in start.model.state_dict().items())
    assert not start.optimizer.state and start.settings == {"lr": 0.01, "grad_clip": 0.0, "epochs": 2,
                                                            "augment": "off"}
    assert run.events() == []


def test_init_from_copies_the_weights_only_and_starts_at_step_0(parent, runs_dir):
    best = load_checkpoint(parent.best_ckpt)
    run = make_run(runs_dir, base=RUN, init_from=str(parent.best_ckpt), lr=0.005)
    start = begin(run)
    assert start.position == Position()
    assert start.note == f"weights from {parent.best_ckpt} (trained {best.epoch} epochs, {best.step} steps)"
    assert same_weights(start.model, parent.best_ckpt)
    assert not start.optimizer.state and start.optimizer.param_groups[0]["lr"] == 0.005


def test_init_from_a_checkpoint_of_other_classes_is_refused(runs_dir, tmp_path):
    five = tmp_path / "five.pt"
    save_checkpoint(five, hidden_8(num_classes=5), classes=list("abcde"))
    run = make_run(runs_dir, base=RUN, init_from=str(five))
    with pytest.raises(CheckpointError) as refused:
        begin(run)
    assert str(refused.value) == (f"init_from {five} predicts a, b, c, d, e, but mnist-sample has "
                                  f"{', '.join(MNIST_CLASSES)}: start from a checkpoint trained on mnist-sample")


def test_a_branch_first_starts_from_its_parents_checkpoint_with_the_new_lr(parent, runs_dir):
    source = copy_run(parent, runs_dir)
    saved = load_checkpoint(source.last_ckpt)
    branch = create_branch(runs_dir, source.id, "last", {"lr": 0.002, "epochs": 3})
    start = begin(branch)  # not a resume: the branch has no last.pt of its own yet
    assert start.position == Position(2, 0, 2 * SPE)
    assert same_weights(start.model, source.last_ckpt)
    assert torch.equal(adam_moments(start.optimizer), saved.optimizer_state["state"][0]["exp_avg"])
    assert start.optimizer.param_groups[0]["lr"] == 0.002 and start.settings["lr"] == 0.002
    [event] = [e for e in branch.events() if e["kind"] == "branch"]
    assert event["message"] == \
        f"branched from {source.id}'s last.pt at epoch 2, step {2 * SPE}: weights and optimizer state"
    assert (event["parent"], event["checkpoint"], event["optimizer_restored"], event["step"]) == \
        (source.id, "last", True, 2 * SPE)
    assert {e["field"]: (e["old"], e["new"], e["source"]) for e in branch.events() if e["kind"] == "set"} == \
        {"lr": (0.01, 0.002, "branch"), "epochs": (2, 3, "branch")}

    drop_start_copy(branch)  # no last.pt of its own yet: the copy of the parent's stays
    assert (branch.checkpoint_dir / PARENT_CKPT).is_file()
    save_checkpoint(branch.last_ckpt, start.model, classes=MNIST_CLASSES, epoch=2, step=2 * SPE,
                    optimizer=start.optimizer)
    drop_start_copy(branch)
    assert not (branch.checkpoint_dir / PARENT_CKPT).exists()
    begin(branch, resume=True)  # from now on a start of the branch is a resume of its own last.pt
    assert [e["kind"] for e in branch.events()][-1] == "resume"


def test_a_branch_of_best_pt_starts_with_a_fresh_optimizer(parent, runs_dir):
    source = copy_run(parent, runs_dir)
    best = load_checkpoint(source.best_ckpt)
    branch = create_branch(runs_dir, source.id, "best", {"epochs": 3})
    start = begin(branch)
    assert start.position == Position(best.epoch, 0, best.step) and same_weights(start.model, source.best_ckpt)
    assert not start.optimizer.state
    [event] = [e for e in branch.events() if e["kind"] == "branch"]
    assert event["optimizer_restored"] is False
    assert event["message"] == (f"branched from {source.id}'s best.pt at epoch {best.epoch}, step {best.step}: "
                                "weights, fresh optimizer state: the checkpoint carries no optimizer state "
                                "(best.pt keeps only the weights)")


@pytest.mark.parametrize(("overrides", "batch"), [({}, 3), ({"batch_size": 256}, 0)], ids=["same", "other-batches"])
def test_a_branch_of_a_mid_epoch_checkpoint_replays_its_epoch_only_with_the_same_batches(stopped, runs_dir,
                                                                                         overrides, batch):
    source = copy_run(stopped, runs_dir)
    start = begin(create_branch(runs_dir, source.id, "last", overrides))
    assert start.position == Position(1, batch, 11)  # other batches: the unfinished epoch starts over


# ------------------------------------------------------------------ resume
def test_a_resume_continues_from_last_pt_with_its_live_values_and_drops_later_rows(stopped, runs_dir):
    run = copy_run(stopped, runs_dir)
    saved = load_checkpoint(run.last_ckpt)
    for step in (12, 13):  # rows a killed worker logged after its last save
        run.log_metric(step=step, epoch=1.5, split="train", loss=2.0, lr=0.003)
    bar = re.search(r"^epoch (\d+)/", progress_text(run.status())).group(1)  # what its progress line said at the stop
    start = begin(run, resume=True)
    assert start.position == Position(1, 3, 11, load_checkpoint(run.best_ckpt).metrics["val_loss"])
    assert same_weights(start.model, run.last_ckpt)
    assert torch.equal(adam_moments(start.optimizer), saved.optimizer_state["state"][0]["exp_avg"])
    # The config says lr 0.01, grad_clip 0; the run was changed live to 0.003 and 2 before it stopped.
    assert start.settings == {"lr": 0.003, "grad_clip": 2.0, "epochs": 2, "augment": "off"}
    assert start.optimizer.param_groups[0]["lr"] == 0.003
    # the event counts the epoch as the progress line did (1 epoch and 3 batches done: it was in its 2nd)
    assert bar == "2" and run.events()[-1]["message"] == (f"resumed from last.pt in epoch {bar}, step 11 (2 metric "
                                                          "rows logged after that checkpoint were dropped)")
    assert run.metrics().step.max() == 11


def test_a_resume_without_any_last_pt_starts_again_from_step_0(runs_dir):
    run = make_run(runs_dir, base=RUN)
    run.log_metric(step=1, epoch=0.125, split="train", loss=2.3, lr=0.01)  # logged, killed before the first save
    start = begin(run, resume=True)
    assert start.position == Position() and not start.optimizer.state
    assert run.events()[-1]["message"] == "no checkpoint was saved yet: starting again from step 0"
    assert run.metrics_path.read_text().splitlines()[1:] == []


def test_resume_from_another_runs_checkpoint(parent, runs_dir):
    trial = make_run(runs_dir, base=RUN, epochs=3)  # a PBT trial taking a better trial's weights
    start = begin(trial, resume=True, resume_from=parent.last_ckpt)
    assert start.position == Position(2, 0, 2 * SPE) and same_weights(start.model, parent.last_ckpt)
    assert trial.events()[-1]["message"] == f"resumed from {parent.last_ckpt} in epoch 3, step {2 * SPE}"
    assert not trial.last_ckpt.exists()  # choose_start reads; the worker saves the run's own last.pt


def test_a_trial_exploiting_another_checkpoint_trains_on_with_the_lr_set_before_its_first_step(stopped, runs_dir):
    """PBT: the donor's last.pt brings back its lr (0.003); the trial's new lr, set before the first step, wins."""
    trial = make_run(runs_dir, base=RUN)
    exploit = lambda session: session.change("lr", 0.004, source="pbt", donor=stopped.id)  # noqa: E731
    assert train_run_dir(trial, data_dir=runs_dir, resume=True, resume_from=stopped.last_ckpt,
                        before_start=exploit) == "finished"
    train = trial.metrics().query("split == 'train'")
    assert list(train.step) == list(range(12, 17)) and (train.lr == 0.004).all()  # the donor stopped at step 11
    [change] = [e for e in trial.events() if e["kind"] == "set"]
    assert (change["old"], change["new"], change["source"], change["donor"]) == (0.003, 0.004, "pbt", stopped.id)
    last = load_checkpoint(trial.last_ckpt)
    assert last.step == 2 * SPE and last.optimizer_state["param_groups"][0]["lr"] == 0.004


# ------------------------------------------------------------------ start_from_checkpoint
def test_the_new_lr_is_put_back_after_the_optimizer_state_is_loaded(parent):
    saved = load_checkpoint(parent.last_ckpt)
    assert saved.optimizer_state["param_groups"][0]["lr"] == 0.01
    model = RecurrentClassifier(saved.model_config)
    optimizer = make_optimizer(model.parameters(), "adam", 0.002, weight_decay=0.1)
    warm = start_from_checkpoint(parent.last_ckpt, model, optimizer)
    assert warm.optimizer_restored and (warm.position.epoch, warm.position.step) == (2, 2 * SPE)
    assert optimizer.param_groups[0]["weight_decay"] == 0.1  # the saved 0 gave way
    assert torch.equal(adam_moments(optimizer), saved.optimizer_state["state"][0]["exp_avg"])
    assert torch.equal(model.state_dict()["fc.weight"], saved.model_state["fc.weight"])
    # The lr is the session's to set: from its live values, whatever the loaded state brought back.
    cfg = TrainConfig.from_dict({**RUN, "lr": 0.002, "epochs": 3})
    live = LiveSettings.of(cfg).with_saved({"grad_clip": 2.0, "other": 1})  # only live fields
    assert live.to_dict() == {"lr": 0.002, "grad_clip": 2.0, "epochs": 3, "augment": "off"}
    TrainingSession(parent, cfg, model, optimizer, classes=MNIST_CLASSES, steps_per_epoch=SPE, live=live)
    assert optimizer.param_groups[0]["lr"] == 0.002  # the saved 0.01 gave way


def test_another_optimizer_starts_fresh_and_says_why(parent):
    saved = load_checkpoint(parent.last_ckpt)
    model = RecurrentClassifier(saved.model_config)
    optimizer = make_optimizer(model.parameters(), "sgd", 0.05, momentum=0.5)
    warm = start_from_checkpoint(saved, model, optimizer)
    assert not warm.optimizer_restored
    assert warm.fresh_reason == "the optimizer changed (adam -> sgd): its saved state does not apply"
    assert not optimizer.state and optimizer.param_groups[0]["momentum"] == 0.5
    assert torch.equal(model.state_dict()["lstm.weight_hh_l0"], saved.model_state["lstm.weight_hh_l0"])


def test_an_optimizer_state_of_other_parameters_is_refused(tmp_path):
    model = hidden_8()
    partial = make_optimizer(list(model.parameters())[:2], "adam", 0.01)  # saved by some other code
    path = tmp_path / "odd.pt"
    save_checkpoint(path, model, classes=MNIST_CLASSES, optimizer=partial, train_config={"optimizer": "adam"})
    optimizer = make_optimizer(model.parameters(), "adam", 0.01)
    with pytest.raises(CheckpointError, match="the checkpoint's optimizer state does not fit this model"):
        start_from_checkpoint(path, model, optimizer)
    assert not optimizer.state  # refused whole, not half-loaded


def test_weights_of_another_architecture_are_refused_naming_the_layers(parent):
    model = hidden_8(hidden_size=16)
    before = {k: t.clone() for k, t in model.state_dict().items()}
    optimizer = make_optimizer(model.parameters(), "adam", 0.01)
    with pytest.raises(CheckpointError) as refused:
        start_from_checkpoint(parent.last_ckpt, model, optimizer)
    message = str(refused.value)
    assert message.startswith("checkpoint does not fit the model: layer fc.weight: expected shape (10, 32), "
                              "found (10, 16)")
    assert "layer lstm.weight_hh_l0: expected shape (64, 16), found (32, 8)" in message
    assert all(torch.equal(t, before[k]) for k, t in model.state_dict().items()) and not optimizer.state


# ------------------------------------------------------------------ drop_metrics_after
def test_drop_metrics_after_keeps_whole_rows_up_to_the_step(runs_dir):
    run = make_run(runs_dir, base=RUN)
    for step in (2, 4, 6, 8):
        run.log_metric(step=step, epoch=step / SPE, split="train", loss=2.0, lr=0.01)
    with open(run.metrics_path, "a") as fh:
        fh.write("x,0.5,train,2.0,,0.01,,0\n")  # a row whose step is unreadable
        fh.write("10,1.25,train,1.9")  # half a row: the worker was killed mid-append
    assert drop_metrics_after(run, 5) == 4
    assert [row.split(",")[0] for row in run.metrics_path.read_text().splitlines()] == ["step", "2", "4"]
    inode = os.stat(run.metrics_path).st_ino
    assert drop_metrics_after(run, 5) == 0 and drop_metrics_after(run, 4) == 0
    assert os.stat(run.metrics_path).st_ino == inode  # nothing to drop: the file is not rewritten
