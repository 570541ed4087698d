"""The control channel, both ends: the training session applying commands (training/session.py, reading them
through training/control.py) and the sending side a page uses (runs/protocol.py: `live_settings`,
`send_live_changes`, `outcomes`).

Every command is a real line in a real control.jsonl, acknowledged in the real events.jsonl with its id; the
last test steers a real tiny training run in this process. The same flow in a worker subprocess:
test_runs.py (pause/set/resume/stop) and test_faults_command_storm.py (200 commands).
"""

from __future__ import annotations

import json
import threading

import pytest
import torch
from helpers import TINY, make_run, wait_for
from helpers import TINY_STEPS_PER_EPOCH as SPE

from brnn_core.config import LIVE_FIELDS, TrainConfig
from brnn_core.data.datasets import MNIST_CLASSES
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.runs.protocol import Outcome, live_problems, live_settings, outcomes, send_live_changes
from brnn_core.runs.rundir import Run, create_run
from brnn_core.training.engine import make_optimizer
from brnn_core.training.recorder import Position
from brnn_core.training.session import STATUS_EVERY_S, TrainingSession
from brnn_core.training.worker import train_run_dir

LIVE = {"lr": 0.01, "grad_clip": 0.0, "epochs": 3, "augment": "off"}


@pytest.fixture
def run(runs_dir) -> Run:
    """A queued run whose live values are LIVE (no worker: the tests call its session themselves)."""
    return make_run(runs_dir, base=TINY, **LIVE)


@pytest.fixture
def optimizer() -> torch.optim.Optimizer:
    model = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1))
    return make_optimizer(model.parameters(), "adam", LIVE["lr"])


def controller(run: Run, optimizer: torch.optim.Optimizer, step: int = 0) -> TrainingSession:
    """A session at `step` on the run's config, as the worker builds it (no data: nothing trains)."""
    cfg = TrainConfig.from_dict(run.config()["train"])
    model = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1))
    return TrainingSession(run, cfg, model, optimizer, classes=MNIST_CLASSES, steps_per_epoch=SPE,
                           start=Position(step=step))


def acks(run: Run) -> dict[str, dict]:
    """Command id -> the event that acknowledged it."""
    return {e["command"]: e for e in run.events() if e.get("command")}


def lr_of(optimizer: torch.optim.Optimizer) -> list[float]:
    return [group["lr"] for group in optimizer.param_groups]


# ------------------------------------------------------------------ the worker's end
def test_pause_blocks_between_steps_until_resume_and_both_are_acknowledged(run, optimizer):
    control = controller(run, optimizer, step=7)
    pause = run.send_command("pause")
    control.poll()
    status = run.stored_status()
    assert control.paused and (status["state"], status["message"], status["step"]) == ("paused", "paused at step 7", 7)
    assert status["control_offset"] == run.control_path.stat().st_size  # a later worker does not replay it
    assert status["live"] == LIVE
    event = acks(run)[pause]
    assert (event["kind"], event["message"], event["step"]) == ("pause", "paused at step 7", 7)

    returned = []
    waiter = threading.Thread(target=lambda: returned.append(control.before_step(7)), daemon=True)
    beat = run.stored_status().get("heartbeat", 0)
    waiter.start()
    # While paused the worker keeps beating (the dashboard then knows it is alive) and takes no step.
    wait_for(lambda: run.stored_status().get("heartbeat", 0) > beat + STATUS_EVERY_S, 30, "a heartbeat while paused")
    assert waiter.is_alive() and not returned and run.stored_status()["state"] == "paused"

    resume = run.send_command("resume")
    waiter.join(30)
    assert returned == [True] and not control.paused
    status = run.stored_status()
    assert (status["state"], status["message"]) == ("running", "resumed at step 7")
    assert (acks(run)[resume]["kind"], acks(run)[resume]["message"]) == ("resume", "resumed at step 7")


def test_a_second_pause_or_a_resume_while_running_is_acknowledged_and_changes_nothing(run, optimizer):
    control = controller(run, optimizer, step=3)
    ids = [run.send_command("pause"), run.send_command("pause"), run.send_command("resume"),
           run.send_command("resume")]
    assert control.before_step(3) is True  # paused and resumed within one poll: no wait
    assert [acks(run)[cid]["kind"] for cid in ids] == ["pause", "pause", "resume", "resume"]
    assert [e["kind"] for e in run.events()] == ["pause", "pause", "resume", "resume"]
    assert run.stored_status()["state"] == "running"


def test_stop_ends_the_loop_and_records_who_asked(run, optimizer):
    control = controller(run, optimizer)
    user = run.send_command("stop")
    assert control.before_step(12) is False
    assert control.stop_requested and control.stop_reason is None
    status = run.stored_status()
    assert (status["state"], status["message"]) == ("stopping", "stopping at step 12: saving a checkpoint")
    assert acks(run)[user]["message"] == "stop requested at step 12"

    scheduler = controller(run, optimizer)
    asha = run.send_command("stop", source="asha", reason="below the median at epoch 2")
    assert scheduler.before_step(14) is False
    assert scheduler.stop_reason == {"source": "asha", "reason": "below the median at epoch 2"}
    assert acks(run)[asha]["message"] == "stop requested at step 14 by asha: below the median at epoch 2"


def test_set_changes_the_live_values_and_the_optimizer_lr(run, optimizer):
    control = controller(run, optimizer, step=3)
    sent = {run.send_command("set", field="lr", value=0.001): ("lr", 0.01, 0.001, "lr 0.01 -> 0.001 at step 3"),
            run.send_command("set", field="grad_clip", value="1.5"): ("grad_clip", 0.0, 1.5,
                                                                        "grad_clip 0 -> 1.5 at step 3"),
            run.send_command("set", field="epochs", value="5"): ("epochs", 3, 5, "epochs 3 -> 5 at step 3"),
            run.send_command("set", field="augment", value="strong"): ("augment", "off", "strong",
                                                                         "augment off -> strong at step 3")}
    assert control.before_step(3) is True
    assert control.live.to_dict() == {"lr": 0.001, "grad_clip": 1.5, "epochs": 5, "augment": "strong"}
    assert isinstance(control.live.epochs, int)  # "5" from a form is checked and typed like the form's
    assert lr_of(optimizer) == [0.001]
    for cid, (field, old, new, message) in sent.items():
        event = acks(run)[cid]
        assert (event["kind"], event["field"], event["old"], event["new"]) == ("set", field, old, new)
        assert (event["message"], event["step"], event["source"]) == (message, 3, "user")
    assert run.stored_status()["live"] == control.live.to_dict()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("lr", -1, "rejected lr=-1: invalid training config:\n  lr: -1.0 is out of range; allowed 1e-07 to 10"),
    ("lr", float("nan"), "rejected lr=nan: invalid training config:\n  lr: nan is out of range"),
    ("lr", "fast", "rejected lr='fast': invalid training config:\n  lr: expected a number, got 'fast'"),
    ("epochs", 2.5, "rejected epochs=2.5: invalid training config:\n  epochs: expected a whole number, got 2.5"),
    ("augment", "extreme", "rejected augment='extreme': invalid training config:\n  augment: 'extreme' is not one of"),
    ("hidden_size", 16, "'hidden_size' cannot change while training (only lr, grad_clip, epochs, augment)"),
])
def test_bad_values_are_refused_with_a_message_and_change_nothing(run, optimizer, field, value, message):
    control = controller(run, optimizer, step=4)
    cid = run.send_command("set", field=field, value=value)
    assert control.before_step(4) is True  # a refused value never stops training
    event = acks(run)[cid]
    assert event["kind"] == "warning" and event["message"].startswith(message) and event["step"] == 4, event
    if field in LIVE_FIELDS:  # what the worker refuses, a sender (the Train page, the Python API) refuses first
        assert live_problems(run, {field: value})[field] in event["message"]
    assert control.live.to_dict() == LIVE and lr_of(optimizer) == [0.01]
    assert run.stored_status().get("live", LIVE) == LIVE  # no status rewrite claims a change
    [outcome] = outcomes(run.events(), {cid: f"{field} → {value}"})
    assert (outcome.result, outcome.message) == ("refused", event["message"])


def test_unknown_and_malformed_commands_are_warned_about_and_skipped(run, optimizer):
    control = controller(run, optimizer, step=2)
    with open(run.control_path, "a") as fh:
        fh.write("this is not json\n[1, 2]\n")
    jump = run.send_command("jump")
    lr = run.send_command("set", field="lr", value=0.002)
    assert control.before_step(2) is True
    warnings = [e["message"] for e in run.events() if e["kind"] == "warning"]
    assert warnings == ["ignored a malformed command line: 'this is not json'",
                        "ignored a malformed command line: '[1, 2]'", "unknown command 'jump' ignored"]
    assert acks(run)[jump]["kind"] == "warning" and acks(run)[lr]["kind"] == "set"  # later lines still apply
    assert lr_of(optimizer) == [0.002]


def test_each_command_is_applied_once_in_file_order_even_across_workers(run, optimizer):
    first = controller(run, optimizer, step=5)
    ids = [run.send_command("set", field="lr", value=0.005), run.send_command("stop")]
    assert first.before_step(5) is False  # the stop saves the offset in status.json: the next worker starts after it
    # A half-written line (the sender is mid-append) waits until its newline arrives.
    with open(run.control_path, "a") as fh:
        fh.write('{"id": "late-pause", "cmd": "pau')
    second = controller(run, optimizer, step=5)
    assert second.control.offset == run.stored_status()["control_offset"] > 0
    assert second.before_step(5) is True  # neither the set nor the stop is applied again
    assert [e.get("command") for e in run.events()] == ids
    with open(run.control_path, "a") as fh:
        fh.write('se"}\n')
    ids.append(run.send_command("set", field="lr", value=0.002))
    second.poll()
    assert second.paused and [e.get("command") for e in run.events()] == [*ids[:2], "late-pause", ids[2]]
    assert [e["new"] for e in run.events() if e["kind"] == "set"] == [0.005, 0.002]
    assert lr_of(optimizer) == [0.002]


# ------------------------------------------------------------------ the sending side (runs/protocol.py)
def test_live_settings_come_from_the_status_else_from_the_config(run, runs_dir):
    assert live_settings(run, run.stored_status()) == LIVE  # no worker has reported yet: config.json's values
    running = {"live": {"lr": 0.002, "grad_clip": 1.0, "epochs": 4, "augment": "light"}}
    assert live_settings(run, running) == running["live"]
    older = {"live": {"lr": 0.002, "grad_clip": 1.0, "epochs": 4}}  # a worker from before augmentation
    assert live_settings(run, older) == {**older["live"], "augment": "off"}
    legacy = create_run(runs_dir, {"train": {"lr": 0.03, "grad_clip": 0.0, "epochs": 2}}, run_id="legacy")
    assert live_settings(legacy, legacy.stored_status()) == {"lr": 0.03, "grad_clip": 0.0, "epochs": 2,
                                                          "augment": "off"}


def test_send_live_changes_sends_one_set_per_changed_field(run):
    current = live_settings(run, run.stored_status())
    wanted = {**current, "lr": 0.001, "epochs": 5, "grad_clip": None, "hidden_size": 16}  # None: not asked
    sent = send_live_changes(run, current, wanted)
    assert list(sent.values()) == ["lr → 0.001", "epochs → 5"]  # LIVE_FIELDS order; unchanged ones not sent
    lines = [json.loads(line) for line in run.control_path.read_text().splitlines()]
    assert [(c["id"], c["cmd"], c["field"], c["value"]) for c in lines] == \
        [(cid, "set", field, value) for cid, (field, value) in zip(sent, [("lr", 0.001), ("epochs", 5)], strict=True)]
    assert all(c["time"] for c in lines)
    assert send_live_changes(run, current, current) == {}  # nothing changed: nothing sent
    assert len(run.control_path.read_text().splitlines()) == 2


def test_outcomes_follow_each_sent_command_until_the_worker_answers(run, optimizer):
    current = live_settings(run, run.stored_status())
    sent = send_live_changes(run, current, {**current, "lr": 0.001, "augment": "medium", "grad_clip": -3.0})
    sent[run.send_command("pause")] = "Pause"
    assert outcomes(run.events(), sent) == [Outcome(label, "waiting") for label in sent.values()]

    controller(run, optimizer, step=9).poll()
    found = outcomes(run.events(), sent)
    assert [(o.label, o.result) for o in found] == [("lr → 0.001", "applied"), ("grad_clip → -3", "refused"),
                                                    ("augment → medium", "applied"), ("Pause", "done")]
    assert found[0].message == "lr 0.01 -> 0.001 at step 9"
    assert found[1].message.startswith("rejected grad_clip=-3.0: invalid training config")
    assert found[2].message == "augment off -> medium at step 9" and found[3].message == "paused at step 9"
    assert outcomes(run.events(), {}) == []


# ------------------------------------------------------------------ a real run, steered between its steps
def test_a_training_run_pauses_changes_lr_resumes_and_stops_at_the_commanded_steps(runs_dir):
    # SPE steps an epoch, a metrics row every step, a constant lr
    run = make_run(runs_dir, base=TINY, epochs=3, augment="off", lr_schedule="constant")
    sent: dict[str, str] = {}

    def steer(kind: str, info: dict) -> None:  # the worker's progress printer: called after each logged step
        if kind == "log" and info["step"] == 3:
            sent[run.send_command("pause")] = "Pause"
            threading.Thread(target=set_lr_and_resume, daemon=True).start()
        elif kind == "log" and info["step"] == 12:
            sent[run.send_command("stop")] = "Stop"

    def set_lr_and_resume() -> None:
        paused = wait_for(lambda: (s := run.stored_status())["state"] == "paused" and s, 60, "the run to pause")
        wait_for(lambda: run.stored_status()["heartbeat"] > paused["heartbeat"] + STATUS_EVERY_S, 30, "a heartbeat")
        assert run.stored_status()["step"] == 3  # paused: no step taken
        sent.update(send_live_changes(run, live_settings(run, run.stored_status()), {"lr": 0.001}))
        sent[run.send_command("resume")] = "Resume"

    assert train_run_dir(run, data_dir=runs_dir, printer=steer) == "stopped"
    status = run.status()
    assert status["step"] == 12 and status["live"]["lr"] == 0.001
    train = run.metrics().query("split == 'train'")
    assert list(train.step) == list(range(1, 13))
    assert (train[train.step <= 3].lr == 0.01).all() and (train[train.step > 3].lr == 0.001).all()
    assert [(o.label, o.result) for o in outcomes(run.events(), sent)] == \
        [("Pause", "done"), ("lr → 0.001", "applied"), ("Resume", "done"), ("Stop", "done")]
    steered = [(e["kind"], e["message"]) for e in run.events() if e.get("command")]
    assert steered == [("pause", "paused at step 3"), ("set", "lr 0.01 -> 0.001 at step 3"),
                       ("resume", "resumed at step 3"), ("stop", "stop requested at step 12")]
    kinds = [e["kind"] for e in run.events() if e["kind"] != "threads"]
    assert kinds == ["start", "pause", "set", "resume", "epoch", "stop", "stopped"]


def test_a_control_file_cut_mid_run_is_read_again_from_its_start(tmp_path):
    """Truncated (or replaced by a shorter file) while a worker reads it: a Stop written afterwards still counts."""
    from brnn_core.runs.protocol import command_line
    from brnn_core.training.control import ControlReader

    path = tmp_path / "control.jsonl"
    lines = [command_line(cmd, "2026-01-01T00:00:00")[1] for cmd in ("pause", "resume", "pause", "resume")]
    path.write_text("".join(line + "\n" for line in lines))
    reader = ControlReader(path)
    assert [r.command.cmd for r in reader.read()] == ["pause", "resume", "pause", "resume"]
    path.write_text(command_line("stop", "2026-01-01T00:00:01")[1] + "\n")  # shorter than the offset read so far
    assert [r.command.cmd for r in reader.read()] == ["stop"]
    assert reader.read() == []
