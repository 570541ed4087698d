"""Branches (`train --from RUN[:last|:best]`): real tiny training on mnist-sample, CPU.

A branch of last.pt with nothing changed but the epoch count must train exactly as the parent
would have trained on (same weights, same Adam state, same batches): the chain parent -> child ->
grandchild is compared number by number with one straight run of as many epochs.
"""

from __future__ import annotations

import os
import threading

import psutil
import pytest
from helpers import STEPS_PER_EPOCH as SPE
from helpers import copy_run, kill_workers, make_run, wait_for

from brnn_core import charts, cli
from brnn_core.checkpoint import load_checkpoint, save_checkpoint
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.runs import job_queue as queue
from brnn_core.runs.branch import PARENT_CKPT, BranchError, branch_points, create_branch, plan_branch, with_parents
from brnn_core.runs.jobs import JobRegistry
from brnn_core.runs.rundir import Run, create_run, list_runs
from brnn_core.training.worker import train_run_dir

# A constant lr: a cosine schedule is planned over the run's epochs, so a branch that raises them (and the straight
# run it is compared with) would follow another curve than its parent did.
PARENT = {"hidden_size": 8, "num_layers": 1, "epochs": 2, "log_interval": 5, "seed": 3, "lr": 0.01,
          "lr_schedule": "constant"}


def branch_cli(runs_dir, ref: str, *settings: str) -> int:
    args = ["train", "--from", ref, "--runs-dir", str(runs_dir), "--data-dir", str(runs_dir / "data")]
    return cli.main(args + [a for s in settings for a in ("--set", s)])


def only_new_run(runs_dir, *known: Run) -> Run:
    new = [r for r in list_runs(runs_dir) if r.id not in {k.id for k in known}]
    assert len(new) == 1, [r.id for r in new]
    return new[0]


def val_losses(run: Run) -> dict[int, float]:
    m = run.metrics()
    return {int(e): loss for e, loss in zip(m[m.split == "val"].epoch, m[m.split == "val"].loss, strict=True)}


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """parent (2 epochs) -> child (:last, to 3 epochs) -> grandchild (:last, to 4), and a straight 4-epoch run."""
    runs_dir = tmp_path_factory.mktemp("family") / "runs"
    parent = make_run(runs_dir, **PARENT)
    assert train_run_dir(parent, data_dir=runs_dir / "data") == "finished"
    assert branch_cli(runs_dir, parent.id, "epochs=3") == 0
    child = only_new_run(runs_dir, parent)
    assert branch_cli(runs_dir, f"{child.id}:last", "epochs=4") == 0
    grandchild = only_new_run(runs_dir, parent, child)
    straight = make_run(runs_dir.parent / "straight", **{**PARENT, "epochs": 4})
    assert train_run_dir(straight, data_dir=runs_dir / "data") == "finished"
    return runs_dir, parent, child, grandchild, straight


@pytest.fixture(scope="module")
def parent_run(family) -> Run:
    return family[1]


def test_a_branch_names_its_parent_and_continues_its_step_axis(family):
    runs_dir, parent, child, grandchild, _ = family
    assert child.config()["parent"] == {"run_id": parent.id, "checkpoint": "last", "step": 2 * SPE, "epoch": 2}
    assert grandchild.config()["parent"] == {"run_id": child.id, "checkpoint": "last", "step": 3 * SPE, "epoch": 3}
    for run, start, epochs in ((child, 2 * SPE, 3), (grandchild, 3 * SPE, 4)):
        m = run.metrics()
        train = m[m.split == "train"]
        assert train.step.iloc[0] == start + PARENT["log_interval"]  # the first logged step follows the parent's
        assert train.step.is_monotonic_increasing and train.epoch.min() > epochs - 1
        assert list(m[m.split == "val"].epoch) == [epochs]  # the epoch count continues too
        assert run.status()["state"] == "finished" and run.status()["step"] == epochs * SPE
        assert run.config()["train"]["epochs"] == epochs
        assert not (run.checkpoint_dir / PARENT_CKPT).exists()  # its own last.pt took over
        branch = next(e for e in run.events() if e["kind"] == "branch")
        assert branch["optimizer_restored"] is True and branch["step"] == start
        assert "weights and optimizer state" in branch["message"]
        sets = [(e["field"], e["old"], e["new"], e["source"]) for e in run.events() if e["kind"] == "set"]
        assert sets == [("epochs", epochs - 1, epochs, "branch")]
    assert with_parents(runs_dir, [grandchild.id]) == [grandchild.id, child.id, parent.id]


def test_the_branch_chain_trains_exactly_like_one_straight_run(family):
    _, parent, child, grandchild, straight = family
    straight_val = val_losses(straight)
    chain = {**val_losses(parent), **val_losses(child), **val_losses(grandchild)}
    assert sorted(chain) == [1, 2, 3, 4]
    for epoch in (1, 2, 3, 4):
        assert chain[epoch] == pytest.approx(straight_val[epoch], rel=1e-6), epoch
    assert grandchild.status()["test_acc"] == pytest.approx(straight.status()["test_acc"], abs=1e-9)
    assert chain[4] < chain[2]  # and training did go on


def test_compare_figure_marks_the_branch_points(family):
    runs_dir, parent, child, grandchild, _ = family
    ids = with_parents(runs_dir, [grandchild.id, child.id])
    curves = {rid: Run(runs_dir / rid).metrics() for rid in ids}
    points = branch_points(runs_dir, ids)
    fig = charts.compare_figure(curves, what="train", branches=points)
    assert [trace.name for trace in fig.data] == [grandchild.id, child.id, parent.id]
    lines = [(s.x0, s.line.dash) for s in fig.layout.shapes]
    assert sorted(lines) == [(2 * SPE, "dash"), (3 * SPE, "dash")]
    labels = sorted(a.text for a in fig.layout.annotations)
    suffix = lambda r: r.id.rsplit("-", 1)[-1]  # noqa: E731
    assert labels == sorted([f"{suffix(child)} ← {suffix(parent)}:last @ step {2 * SPE}",
                             f"{suffix(grandchild)} ← {suffix(child)}:last @ step {3 * SPE}"])  # ids end in random hex
    # Both curves sit on one step axis: the child's first x follows the branch point.
    assert min(fig.data[1].x) > 2 * SPE and max(fig.data[2].x) <= 2 * SPE
    val = charts.compare_figure(curves, what="val", branches=points)
    assert sorted(s.x0 for s in val.layout.shapes) == [2, 3]  # marked by epoch on the epoch axis
    # A child without its parent in the overlay is still marked; a figure of no branches has none.
    assert len(charts.compare_figure({child.id: curves[child.id]}, branches=points).layout.shapes) == 1
    assert not charts.compare_figure({parent.id: curves[parent.id]}, branches=points).layout.shapes


def test_lr_from_set_is_applied_after_the_optimizer_state_is_restored(parent_run, runs_dir):
    parent = copy_run(parent_run, runs_dir)
    saved = load_checkpoint(parent.last_ckpt)
    assert saved.optimizer_state["param_groups"][0]["lr"] == 0.01
    assert branch_cli(runs_dir, parent.id, "lr=0.002", "grad_clip=1.5") == 0
    child = only_new_run(runs_dir, parent)
    m = child.metrics()
    assert len(m[m.split == "train"]) and (m[m.split.isin(["train", "val"])].lr == 0.002).all()
    last = load_checkpoint(child.last_ckpt)
    assert last.optimizer_state["param_groups"][0]["lr"] == 0.002
    assert last.train_config["live"] == {"lr": 0.002, "grad_clip": 1.5, "epochs": 3, "augment": "auto"}
    assert {e["field"]: (e["old"], e["new"]) for e in child.events() if e["kind"] == "set"} == \
        {"lr": (0.01, 0.002), "grad_clip": (0.0, 1.5), "epochs": (2, 3)}


def test_branch_from_best_starts_with_a_fresh_optimizer(parent_run, runs_dir):
    parent = copy_run(parent_run, runs_dir)
    best = load_checkpoint(parent.best_ckpt)
    assert best.optimizer_state is None
    assert branch_cli(runs_dir, f"{parent.id}:best", "optimizer=sgd", "lr=0.05") == 0
    child = only_new_run(runs_dir, parent)
    assert child.config()["parent"] == {"run_id": parent.id, "checkpoint": "best", "step": best.step,
                                        "epoch": best.epoch}
    branch = next(e for e in child.events() if e["kind"] == "branch")
    assert branch["optimizer_restored"] is False and "best.pt keeps only the weights" in branch["message"]
    m = child.metrics()
    assert m[m.split == "train"].step.min() > best.step and (m[m.split == "train"].lr == 0.05).all()
    assert child.config()["train"]["optimizer"] == "sgd" and child.status()["state"] == "finished"
    assert load_checkpoint(child.last_ckpt).optimizer_state["param_groups"][0]["momentum"] == 0.9


@pytest.mark.parametrize(("setting", "field"), [("hidden_size=16", "hidden_size"), ("num_layers=2", "num_layers"),
                                                ("head=last", "head")])
def test_an_architecture_change_is_refused_and_creates_no_run(parent_run, runs_dir, capsys, setting, field):
    parent = copy_run(parent_run, runs_dir)
    assert branch_cli(runs_dir, parent.id, "lr=0.001", setting) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: a branch keeps its parent's architecture") and "Traceback" not in err
    assert "start a new run instead" in err and f"--set {setting}" in err
    assert [r.id for r in list_runs(runs_dir)] == [parent.id]
    assert not [p for p in runs_dir.iterdir() if p.name.startswith(".")]


def test_bad_branches_exit_2_with_a_message_and_create_nothing(parent_run, runs_dir, capsys):
    parent = copy_run(parent_run, runs_dir)
    cases = [
        ((parent.id, "hidden_size=8", "epochs=5"), None),  # the parent's own architecture is no change
        (("no-such-run",), "no run 'no-such-run'"),
        ((f"{parent.id}:worst",), "after ':' comes the checkpoint, last or best"),
        ((parent.id, "epochs=2"), "epochs=2: epochs counts the parent's epochs too and the checkpoint is at epoch 2; "
                                  "set epochs to at least 3"),
        ((parent.id, "seed=4"), "seed: a branch keeps its parent's seed (3)"),
        ((parent.id, "lr=-1"), "lr: -1.0 is out of range"),
        ((parent.id, "colour=red"), "colour: unknown field"),
    ]
    for args, message in cases:
        if message is None:
            assert plan_branch(runs_dir, args[0], "last", dict(a.split("=") for a in args[1:])).cfg.epochs == 5
            continue
        assert branch_cli(runs_dir, *args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "Traceback" not in err, (args, err)
    assert cli.main(["train", "--from", parent.id, "--resume", parent.id, "--runs-dir", str(runs_dir)]) == 2
    assert "cannot be combined with --resume" in capsys.readouterr().err
    parent.best_ckpt.unlink()
    assert branch_cli(runs_dir, f"{parent.id}:best") == 2
    assert f"run {parent.id} has no best.pt (no epoch has finished yet); branch from {parent.id}:last instead" \
        in capsys.readouterr().err
    assert [r.id for r in list_runs(runs_dir)] == [parent.id]


def test_a_dataset_with_another_class_count_is_refused(runs_dir, capsys):
    """A parent whose model predicts 5 classes (a real checkpoint file); every dataset here has 10."""
    parent = create_run(runs_dir, {"train": {"dataset": "mnist-sample", "hidden_size": 8, "num_layers": 1,
                                             "device": "cpu"}}, run_id="five-classes")
    model = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1, num_classes=5))
    save_checkpoint(parent.last_ckpt, model, classes=list("abcde"), epoch=1, step=10)
    assert branch_cli(runs_dir, parent.id, "dataset=fashion-mnist") == 2
    assert "dataset fashion-mnist has 10 classes but five-classes's model predicts 5" in capsys.readouterr().err
    assert [r.id for r in list_runs(runs_dir)] == [parent.id]


def test_stop_and_resume_a_branch(family, parent_run, runs_dir, capsys):
    straight = family[4]
    parent = copy_run(parent_run, runs_dir)
    child = create_branch(runs_dir, parent.id, "last", {"epochs": 4}, data_dir=runs_dir / "data")
    assert (child.checkpoint_dir / PARENT_CKPT).stat().st_ino == parent.last_ckpt.stat().st_ino  # a link, no copy

    def stop_mid_epoch():
        wait_for(lambda: (child.stored_status().get("step") or 0) >= 2 * SPE + 10, 120, f"step {2 * SPE + 10}",
                 interval=0.005)
        child.send_command("stop")

    stopper = threading.Thread(target=stop_mid_epoch, daemon=True)
    stopper.start()
    assert train_run_dir(child, data_dir=runs_dir / "data") == "stopped"
    stopper.join(timeout=5)
    own = load_checkpoint(child.last_ckpt)
    assert 2 * SPE + 10 <= own.step < 4 * SPE and not (child.checkpoint_dir / PARENT_CKPT).exists()
    assert cli.main(["train", "--resume", str(child.path), "--data-dir", str(runs_dir / "data")]) == 0
    capsys.readouterr()
    final = child.status()
    assert final["state"] == "finished" and final["step"] == 4 * SPE
    m = child.metrics()
    train = m[m.split == "train"]
    assert train.step.min() > 2 * SPE and train.step.is_monotonic_increasing and train.step.is_unique
    kinds = [e["kind"] for e in child.events()]
    assert kinds.count("branch") == 1 and kinds.count("resume") == 1  # resumed from its own last.pt
    resume = next(e for e in child.events() if e["kind"] == "resume")
    assert resume["message"].startswith(f"resumed from last.pt in epoch {own.epoch + 1}, step {own.step}")
    assert val_losses(child)[4] == pytest.approx(val_losses(straight)[4], rel=1e-6)


@pytest.mark.worker
def test_a_branch_started_while_another_run_trains_waits_its_turn(parent_run, runs_dir):
    parent = copy_run(parent_run, runs_dir)
    other = make_run(runs_dir, epochs=1)
    me = psutil.Process(os.getpid())  # a live process stands in for another run's worker, holding the cpu
    other.write_status(state="running", pid=me.pid, pid_started=me.create_time(), slot="cpu")
    slot = queue.try_take(runs_dir, "cpu")
    try:
        child = JobRegistry().branch(runs_dir, parent.id, "last", {"lr": 0.001}, data_dir=runs_dir / "data")
        wait_for(lambda: child.status().get("message") == f"queued: 1st in line, behind run {other.id} on cpu", 120,
                 "the branch to wait for the cpu")
        assert child.metrics().empty
    finally:
        slot.release()
        kill_workers(runs_dir)
    with pytest.raises(BranchError):  # BranchError is a RunError: the pages' handlers catch it
        plan_branch(runs_dir, parent.id, "last", {"num_layers": 3})


@pytest.mark.worker
def test_a_branch_started_by_the_registry_trains_in_a_worker(parent_run, runs_dir, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    parent = copy_run(parent_run, runs_dir)
    registry = JobRegistry()
    child = registry.branch(runs_dir, parent.id, "last", {"lr": 0.004}, data_dir=runs_dir / "data")
    assert registry.process(child.id) is not None  # the registry keeps its worker, to reap it
    status = wait_for(lambda: (s := child.status())["state"] in ("finished", "failed", "interrupted") and s, 300,
                      "the branch's worker to finish")
    assert status["state"] == "finished", (child.path / "worker.log").read_text()[-2000:]
    m = child.metrics()
    assert m[m.split == "train"].step.min() == 2 * SPE + PARENT["log_interval"]
    assert (m[m.split == "train"].lr == 0.004).all()


def test_help_says_the_default_checkpoint(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["train", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--from RUN[:last|:best]" in text and "last.pt by default" in text
