"""One run from start to end (training/worker.py: `train_run_dir`), trained in this process on real files.

Every way a run ends is checked where the user reads it: the state train_run_dir returns, status.json (state,
message, end time), the last event, and the files left behind (checkpoints, metrics, report.json):
finished, stopped (by the user, by a scheduler), diverged, failed (each kind of error with the message that
says what to fix), interrupted. The same outcomes with worker subprocesses: test_faults_*.py, test_crash_recovery.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import SAMPLE_TRAIN_IMAGES, THREADS, TINY, copy_run, make_run, stop_at, write_idx, write_idx_dataset
from helpers import TINY_STEPS_PER_EPOCH as SPE

from brnn_core.checkpoint import load_checkpoint, save_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.data.datasets import IDX_FILES, MNIST_CLASSES
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.runs.branch import PARENT_CKPT, create_branch
from brnn_core.runs.rundir import Run
from brnn_core.training.engine import FitResult, evaluate, make_optimizer
from brnn_core.training.reports import read_report
from brnn_core.training.session import TrainingSession
from brnn_core.training.worker import train_run_dir

# SPE steps an epoch, a metrics row every step; a constant lr, so the numbers below do not follow a schedule.
RUN = {**TINY, "epochs": 2, "augment": "off", "lr_schedule": "constant"}


def tiny(runs_dir: Path, **overrides) -> Run:
    return make_run(runs_dir, base=RUN, **overrides)


def assert_ended(run: Run, state: str, returned: str, *, here: bool = True) -> dict:
    """The run ended `state`: returned, in status.json with an end time, the caller's torch threads given back.
    `here`: it trained in this process (the session's shared runs were trained by whichever test worker came first)."""
    status = run.status()
    assert returned == state and status["state"] == state, status
    assert status["ended"] >= status["started"] and (status["pid"] == os.getpid() or not here)
    assert torch.get_num_threads() == THREADS  # the run plans its own threads (training/threads.py)
    return status


def kinds(run: Run) -> list[str]:
    return [e["kind"] for e in run.events() if e["kind"] != "threads"]  # thread plans come and go with the machine


# ------------------------------------------------------------------ finished
def test_a_finished_run_reports_its_best_checkpoint_on_the_test_set(runs_dir, sample):
    run = tiny(runs_dir)
    printed: list[str] = []
    state = train_run_dir(run, data_dir=runs_dir, printer=lambda kind, info: printed.append(kind))
    status = assert_ended(run, "finished", state)
    best = load_checkpoint(run.best_ckpt)
    test = evaluate(best.build_model(), sample.test_x, sample.test_y, batch_size=500)  # the report's weights
    assert status["message"] == f"finished: test accuracy {100 * test.accuracy:.2f}% (500 images)"
    assert status["test_acc"] == pytest.approx(test.accuracy, abs=1e-9)
    assert status["test_loss"] == pytest.approx(test.loss, rel=1e-5)
    assert (status["step"], status["epoch"], status["steps_done"], status["total_steps"]) == \
        (2 * SPE, 2, 2 * SPE, 2 * SPE)
    assert status["host"] == socket.gethostname() and status["live"]["lr"] == 0.01

    assert kinds(run) == ["start", "epoch", "epoch", "finished"]
    events = [e for e in run.events() if e["kind"] != "threads"]
    assert events[0]["message"] == (f"training mnist-sample on cpu: {SAMPLE_TRAIN_IMAGES} train, 450 val images, "
                                    f"{SPE} steps per epoch")
    assert (events[-1]["message"], events[-1]["step"]) == (status["message"], 2 * SPE)
    test_rows = run.metrics().query("split == 'test'")
    assert list(test_rows.step) == [2 * SPE] and test_rows.accuracy.iloc[0] == pytest.approx(test.accuracy, abs=1e-5)
    report = read_report(run)
    assert (report["checkpoint"], report["size"]) == ("best.pt", 500)
    assert report["accuracy"] == pytest.approx(test.accuracy, abs=1e-9)
    assert sum(map(sum, report["confusion_matrix"])) == 500
    config = run.config()  # what the worker found out, for the Runs page
    assert (config["device"], config["classes"], config["augment"]) == ("cpu", MNIST_CLASSES, "off")
    assert config["sizes"] == {"train": SAMPLE_TRAIN_IMAGES, "val": 450, "test": 500}
    assert [k for k in printed if k not in ("log", "loading")] == ["epoch", "epoch", "test"]
    assert printed.count("log") == 2 * SPE


# ------------------------------------------------------------------ stopped
def test_a_run_stopped_by_the_user_saves_where_it_stands(runs_dir):
    run = tiny(runs_dir)
    status = assert_ended(run, "stopped", train_run_dir(run, data_dir=runs_dir, printer=stop_at(run, 11)))
    assert (status["message"], status["step"], status["stopped_by"]) == ("stopped at step 11, checkpoint saved",
                                                                         11, None)
    assert (status["epoch"], status["batch"], status["steps_done"]) == (1, 3, 11)
    last = load_checkpoint(run.last_ckpt)
    assert (last.epoch, last.batch_in_epoch, last.step) == (1, 3, 11) and last.optimizer_state
    stopped = run.events()[-1]
    assert (stopped["kind"], stopped["step"]) == ("stopped", 11) and "source" not in stopped
    assert stopped["message"] == "stopped at step 11; last.pt saved, resume continues from here"
    assert set(run.metrics().split) == {"train", "val"} and run.metrics().step.max() == 11
    assert not (run.path / "report.json").exists()


def test_a_run_stopped_by_a_scheduler_says_why(runs_dir):
    run = tiny(runs_dir)
    printer = stop_at(run, 5, source="asha", reason="below the median of its rung")
    status = assert_ended(run, "stopped", train_run_dir(run, data_dir=runs_dir, printer=printer))
    assert (status["message"], status["stopped_by"]) == ("below the median of its rung (step 5)", "asha")
    stopped = run.events()[-1]
    assert stopped["message"] == "below the median of its rung; stopped at step 5; last.pt saved, resume continues " \
                                 "from here"
    assert stopped["source"] == "asha" and load_checkpoint(run.last_ckpt).step == 5


# ------------------------------------------------------------------ diverged
def test_a_diverging_run_says_what_to_change_and_keeps_its_starting_weights(diverged):
    """SGD at lr 10 with weight decay 1 multiplies every weight by -9 a step: the loss explodes within steps
    (conftest's `diverged`, trained in a test process; the fixture checks what train_run_dir returned)."""
    run = diverged
    status = assert_ended(run, "diverged", run.status()["state"], here=False)
    message = status["message"]
    assert message.startswith(f"diverged at step {status['step']}: the training loss stayed above 23.0"), message
    assert message.endswith("Lower the learning rate (now 10), weight decay (now 1) or turn on gradient clipping; "
                            "last.pt holds only the untrained starting weights (it diverged before the first save).")
    assert status["step"] < SPE and kinds(run)[-1] == "diverged" and run.events()[-1]["message"] == message
    assert load_checkpoint(run.last_ckpt).step == 0 and not run.best_ckpt.exists()
    assert set(run.metrics().split) == {"train"}  # neither validated nor tested


@pytest.mark.parametrize(("keep", "kept"), [
    (("last.pt", "best.pt"), "last.pt and best.pt hold the last good weights saved before it diverged."),
    (("last.pt",), "last.pt holds the last good weights saved before it diverged."),
    ((), "no checkpoint was saved before it diverged."),
], ids=["both", "last-only", "none"])
def test_the_diverged_message_names_the_checkpoints_left(finished, runs_dir, keep, kept):
    run = copy_run(finished, runs_dir)
    for name in {"last.pt", "best.pt"} - set(keep):
        (run.checkpoint_dir / name).unlink()
    cfg = TrainConfig.from_dict(run.config()["train"])
    model = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1))
    session = TrainingSession(run, cfg, model, make_optimizer(model.parameters(), cfg.optimizer, cfg.lr),
                              classes=MNIST_CLASSES, steps_per_epoch=SPE)
    result = FitResult("diverged", 1, 50, 9, reason="the loss became NaN or infinite")
    assert session.end_diverged(result) == "diverged"
    message = ("diverged at step 50: the loss became NaN or infinite. Lower the learning rate (now 0.01) or turn on "
               f"gradient clipping; {kept}")
    status = run.status()
    assert (status["state"], status["message"], status["step"]) == ("diverged", message, 50)
    assert (run.events()[-1]["kind"], run.events()[-1]["message"]) == ("diverged", message)


# ------------------------------------------------------------------ failed
Setup = Callable[[Path, Run], tuple[Run, dict, str]]  # (runs_dir, finished) -> (run, train_run_dir kwargs, message)


def bad_config(runs_dir: Path, finished: Run) -> tuple[Run, dict, str]:
    run = tiny(runs_dir)
    config = run.config()
    config["train"]["hidden_size"] = 0  # edited by hand
    run.config_path.write_text(json.dumps(config))
    return run, {}, "invalid training config:\n  hidden_size: 0 is out of range; allowed 1 to 4096"


def mismatched_dataset(runs_dir: Path, finished: Run) -> tuple[Run, dict, str]:
    data_dir = runs_dir.parent / "data"
    write_idx_dataset(data_dir, n_train=30, n_test=10, gz=False)
    labels = write_idx(data_dir / "MNIST" / "raw" / IDX_FILES[1], np.zeros(29, np.uint8))
    return tiny(runs_dir, dataset="mnist"), {"data_dir": data_dir}, \
        f"{labels}: 29 labels for 30 images in {IDX_FILES[0]}; the files do not belong together"


def corrupt_last_pt(runs_dir: Path, finished: Run) -> tuple[Run, dict, str]:
    run = copy_run(finished, runs_dir)
    data = run.last_ckpt.read_bytes()
    run.last_ckpt.write_bytes(data[: len(data) // 2])  # a disk that lost the end of it
    return run, {"resume": True}, f"{run.last_ckpt}: not a readable PyTorch checkpoint, the file is truncated"


def last_pt_of_another_architecture(runs_dir: Path, finished: Run) -> tuple[Run, dict, str]:
    run = tiny(runs_dir, epochs=1)
    model = RecurrentClassifier(ModelConfig(hidden_size=16, num_layers=1))
    save_checkpoint(run.last_ckpt, model, classes=MNIST_CLASSES, step=5)
    return run, {"resume": True}, f"{run.last_ckpt} does not belong to this run: checkpoint does not fit the " \
                                  "model: layer fc.weight: expected shape (10, 16), found (10, 32); layer " \
                                  "lstm.weight_ih_l0: expected shape (32, 28), found (64, 28); layer " \
                                  "lstm.weight_hh_l0: expected shape (32, 8), found (64, 16)"


def init_from_another_architecture(runs_dir: Path, finished: Run) -> tuple[Run, dict, str]:
    path = finished.best_ckpt  # hidden 16, 2 layers
    return tiny(runs_dir, init_from=str(path)), {}, \
        f"init_from {path} is a two-way LSTM (BiLSTM) of hidden 16, 2 layers with head bidir and input_scale " \
        "standard; this run asks for a two-way LSTM (BiLSTM) of hidden 8, 1 layer, head bidir, input_scale " \
        "standard: set cell=lstm bidirectional=true hidden_size=16 num_layers=2 head=bidir input_scale=standard " \
        "to match it"


def branch_without_its_start(runs_dir: Path, finished: Run) -> tuple[Run, dict, str]:
    parent = copy_run(finished, runs_dir)
    branch = create_branch(runs_dir, parent.id, "last", {"lr": 0.002})
    (branch.checkpoint_dir / PARENT_CKPT).unlink()
    return branch, {}, f"{branch.checkpoint_dir / PARENT_CKPT} is missing: the copy of {parent.id}'s last.pt this " \
                       "branch starts from is gone; create the branch again"


def unwritable_checkpoints(runs_dir: Path, finished: Run) -> tuple[Run, dict, str]:
    run = tiny(runs_dir)
    shutil.rmtree(run.checkpoint_dir)
    run.checkpoint_dir.write_text("a file where the checkpoints folder should be")
    return run, {}, f"Not a directory ({run.checkpoint_dir}/.last.pt."


FAILURES: dict[str, Setup] = {f.__name__: f for f in (
    bad_config, mismatched_dataset, corrupt_last_pt, last_pt_of_another_architecture, init_from_another_architecture,
    branch_without_its_start, unwritable_checkpoints)}


@pytest.mark.parametrize("case", FAILURES)
def test_a_failed_run_says_what_is_wrong(runs_dir, finished, dead_proxy_env, case):
    run, kwargs, expected = FAILURES[case](runs_dir, finished)
    untouched = {p.name: p.read_bytes() for p in run.checkpoint_dir.glob("*.pt")} if run.checkpoint_dir.is_dir() \
        else {}
    metrics_before = run.metrics_path.read_bytes()
    status = assert_ended(run, "failed", train_run_dir(run, **{"data_dir": runs_dir, **kwargs}))
    assert status["message"].startswith(expected), status["message"]
    if case == "unwritable_checkpoints":
        assert status["message"].endswith("free disk space or make the runs folder writable, then resume this run")
    assert "Traceback" not in status["message"]
    error = run.events()[-1]
    assert (error["kind"], error["message"]) == ("error", status["message"])
    assert "traceback" not in kinds(run)  # a known problem: its message is enough
    # Nothing the user could resume from was overwritten, and no metrics were dropped or added.
    assert {p.name: p.read_bytes() for p in run.checkpoint_dir.glob("*.pt")} == untouched
    assert run.metrics_path.read_bytes() == metrics_before


def test_an_unexpected_error_fails_the_run_with_its_type_and_keeps_the_traceback(runs_dir):
    run = tiny(runs_dir)

    def after_epoch(epoch: int, metrics: dict) -> None:  # a sweep trial reports here; its scheduler went away
        raise RuntimeError(f"the scheduler went away after epoch {epoch}")

    status = assert_ended(run, "failed", train_run_dir(run, data_dir=runs_dir, after_epoch=after_epoch))
    assert status["message"] == "RuntimeError: the scheduler went away after epoch 1"
    assert kinds(run)[-2:] == ["traceback", "error"]
    traceback = run.events()[-2]["message"]
    assert traceback.startswith("Traceback (most recent call last)") and "in after_epoch" in traceback
    assert load_checkpoint(run.last_ckpt).epoch == 1  # what was saved before the error stays


# ------------------------------------------------------------------ interrupted
def test_ctrl_c_leaves_an_interrupted_run_that_resumes_from_its_last_pt(runs_dir):
    run = tiny(runs_dir)

    def ctrl_c(kind: str, info: dict) -> None:
        if kind == "log" and info["step"] == 6:
            raise KeyboardInterrupt

    status = assert_ended(run, "interrupted", train_run_dir(run, data_dir=runs_dir, printer=ctrl_c))
    assert status["message"] == "interrupted from the keyboard"
    assert (kinds(run)[-1], run.events()[-1]["message"]) == ("stop", "interrupted from the keyboard")
    assert load_checkpoint(run.last_ckpt).step == 0  # saved as training started; no save since
    assert train_run_dir(run, data_dir=runs_dir, resume=True) == "finished"
    resume = next(e for e in run.events() if e["kind"] == "resume")
    assert resume["message"] == "resumed from last.pt in epoch 1, step 0 (6 metric rows logged after that " \
                                "checkpoint were dropped)"
    train = run.metrics().query("split == 'train'")
    assert list(train.step) == list(range(1, 2 * SPE + 1)) and run.status()["step"] == 2 * SPE
