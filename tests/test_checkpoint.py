"""Checkpoints: exact round trips, weights_only loading, the blog's bare state_dict, layer-by-layer shape
checks, and a mid-epoch resume from the CLI.

Files that must be refused (damaged, foreign, code-carrying): test_checkpoint_refusals.py; a resume refused
for a last.pt of another architecture or a damaged one: test_worker.py; every way a start loads a checkpoint
(resume, branch, init_from, resume_from, optimizer state): test_warmstart.py.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import psutil
import pytest
import torch
from helpers import SMALL_MODEL, STEPS_PER_EPOCH, make_run, wait_for
from torch import nn

from brnn_core import cli
from brnn_core.checkpoint import (
    FORMAT,
    CheckpointError,
    check_state_matches,
    load_checkpoint,
    save_checkpoint,
)
from brnn_core.config import LIVE_FIELDS
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.training.worker import train_run_dir

CLASSES = [str(i) for i in range(10)]


def model_with(seed=0, **kw) -> RecurrentClassifier:
    torch.manual_seed(seed)
    return RecurrentClassifier(ModelConfig(**{"hidden_size": 8, "num_layers": 2, **kw}))


def logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(x)


def test_round_trip_gives_identical_outputs(tmp_path):
    model = model_with(seed=3, num_classes=7, head="last", dropout=0.2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, classes=list("abcdefg"), train_config={"lr": 0.01}, epoch=2, step=90,
                    batch_in_epoch=5, metrics={"val_loss": 0.25}, optimizer=opt)
    ckpt = load_checkpoint(path)
    assert ckpt.model_config == model.cfg and not ckpt.bare
    assert (ckpt.classes, ckpt.epoch, ckpt.step, ckpt.batch_in_epoch) == (list("abcdefg"), 2, 90, 5)
    assert ckpt.metrics == {"val_loss": 0.25} and ckpt.train_config == {"lr": 0.01}
    assert ckpt.optimizer_state["param_groups"][0]["lr"] == 0.01
    x = torch.rand(6, 28, 28)
    assert torch.equal(logits(ckpt.build_model(), x), logits(model, x))
    # from bytes too (an upload in the dashboard), and the temp file of the atomic write is gone
    assert torch.equal(logits(load_checkpoint(path.read_bytes()).build_model(), x), logits(model, x))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_checkpoints_load_with_plain_torch_weights_only(finished):
    for path in (finished.best_ckpt, finished.last_ckpt):
        obj = torch.load(path, map_location="cpu", weights_only=True)
        assert obj["format"] == FORMAT and obj["classes"] == [str(d) for d in range(10)]
        assert obj["model_config"]["hidden_size"] == SMALL_MODEL["hidden_size"]
        assert obj["model_state"]["fc.weight"].shape == (10, 2 * SMALL_MODEL["hidden_size"])  # both directions
    assert "optimizer_state" in torch.load(finished.last_ckpt, weights_only=True)  # for resuming


class BlogBRNN(nn.Module):
    """The blog script's model, as written there (but reading the device off its input)."""

    def __init__(self, input_size, hidden_size, num_layers, num_classes):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(hidden_size * 2, num_classes)

    def forward(self, x):
        h0 = torch.zeros(self.num_layers * 2, x.size(0), self.hidden_size).to(x.device)
        c0 = torch.zeros(self.num_layers * 2, x.size(0), self.hidden_size).to(x.device)
        out, _ = self.lstm(x, (h0, c0))
        return self.fc(out[:, -1, :])


def test_blog_bare_state_dict_loads_with_inferred_architecture(tmp_path):
    torch.manual_seed(1)
    blog = BlogBRNN(28, 24, 3, 7)
    path = tmp_path / "model.ckpt"
    torch.save(blog.state_dict(), path)  # exactly how the blog saved it
    ckpt = load_checkpoint(path)
    assert ckpt.bare
    assert ckpt.model_config == ModelConfig(hidden_size=24, num_layers=3, num_classes=7, head="last")
    assert ckpt.classes == [str(i) for i in range(7)]
    x = torch.rand(5, 28, 28)
    assert torch.allclose(logits(ckpt.build_model(), x), logits(blog, x), atol=1e-6)


def test_wrapped_and_data_parallel_state_dicts(tmp_path):
    model = model_with(head="last")
    state = {f"module.{k}": v for k, v in model.state_dict().items()}  # saved from nn.DataParallel
    torch.save({"state_dict": state, "epoch": 4}, tmp_path / "dp.pt")
    ckpt = load_checkpoint(tmp_path / "dp.pt")
    assert ckpt.bare and ckpt.model_config.hidden_size == 8 and ckpt.model_config.num_layers == 2
    x = torch.rand(2, 28, 28)
    assert torch.equal(logits(ckpt.build_model(), x), logits(model, x))


def test_bare_state_dicts_that_are_not_the_blogs_model(tmp_path):
    uni = nn.Module()
    uni.lstm = nn.LSTM(28, 8, 1, batch_first=True)  # one-way: fc must read its 8 units, not 16
    uni.fc = nn.Linear(16, 10)
    torch.save(uni.state_dict(), tmp_path / "uni.pt")
    with pytest.raises(CheckpointError, match="fc.weight takes 16 inputs but the LSTM gives 8"):
        load_checkpoint(tmp_path / "uni.pt")
    uni.gru = nn.GRU(28, 8, 1, batch_first=True)  # a GRU's 3 blocks of weights under the LSTM's name
    torch.save({"lstm.weight_ih_l0": uni.gru.weight_ih_l0, "lstm.weight_hh_l0": uni.gru.weight_hh_l0,
                "fc.weight": torch.zeros(10, 8), "fc.bias": torch.zeros(10)}, tmp_path / "misnamed.pt")
    with pytest.raises(CheckpointError, match="lstm.weight_ih_l0 has 24 rows; an LSTM of hidden size 8 has 32"):
        load_checkpoint(tmp_path / "misnamed.pt")
    torch.save({"conv.weight": torch.zeros(3)}, tmp_path / "conv.pt")
    with pytest.raises(CheckpointError, match="missing lstm.weight_ih_l0.*found keys: conv.weight"):
        load_checkpoint(tmp_path / "conv.pt")
    wide = BlogBRNN(32, 8, 1, 10)
    torch.save(wide.state_dict(), tmp_path / "wide.pt")
    with pytest.raises(CheckpointError, match="rows of 32 pixels"):
        load_checkpoint(tmp_path / "wide.pt")


def test_shape_mismatch_names_each_layer_and_both_shapes():
    expected = model_with(hidden_size=16, num_layers=1).state_dict()
    with pytest.raises(CheckpointError) as info:  # another hidden size
        check_state_matches(expected, model_with(hidden_size=8, num_layers=1).state_dict())
    message = str(info.value)
    assert "layer lstm.weight_hh_l0: expected shape (64, 16), found (32, 8)" in message
    # The classifier is listed first, then all 8 LSTM tensors: 9 problems, none hidden behind "... more".
    assert message.startswith("checkpoint does not fit the model: layer fc.weight: expected shape (10, 32), "
                              "found (10, 16); ")
    assert message.count("layer lstm.") == 8 and "more" not in message
    with pytest.raises(CheckpointError) as info:  # another class count
        check_state_matches(expected, model_with(hidden_size=16, num_layers=1, num_classes=5).state_dict())
    assert str(info.value) == ("checkpoint does not fit the model: layer fc.weight: expected shape (10, 32), "
                               "found (5, 32); layer fc.bias: expected shape (10,), found (5,)")
    two_layers = model_with(hidden_size=16, num_layers=2).state_dict()
    with pytest.raises(CheckpointError, match=r"unexpected layer lstm.weight_ih_l1 \(64, 32\)"):
        check_state_matches(expected, two_layers)
    with pytest.raises(CheckpointError, match=r"missing layer lstm.weight_ih_l1 \(expected shape \(64, 32\)\)"):
        check_state_matches(two_layers, expected)
    check_state_matches(expected, model_with(seed=9, hidden_size=16, num_layers=1).state_dict())  # fits


def test_checkpoint_whose_config_does_not_fit_its_weights(tmp_path):
    model = model_with(hidden_size=8)
    save_checkpoint(tmp_path / "c.pt", model, classes=[str(i) for i in range(10)])
    obj = torch.load(tmp_path / "c.pt", weights_only=True)
    obj["model_config"]["hidden_size"] = 12
    torch.save(obj, tmp_path / "forged.pt")
    with pytest.raises(CheckpointError, match=r"header's model_config does not fit its tensors: .*"
                                              r"lstm.weight_hh_l0: expected shape \(48, 12\), found \(32, 8\)"):
        load_checkpoint(tmp_path / "forged.pt")  # refused before a model is built from the header


# ------------------------------------------------------------------ resume
# A constant lr: the epochs are raised while the run is stopped, which would re-plan a cosine schedule.
RESUMABLE = {"hidden_size": 16, "num_layers": 1, "epochs": 2, "log_interval": 5, "seed": 4, "lr_schedule": "constant"}


@pytest.mark.slow
def test_stop_mid_epoch_then_resume_continues_where_it_stopped(runs_dir, capsys):
    run = make_run(runs_dir, **RESUMABLE)

    def stop_after_step_10():
        wait_for(lambda: (run.stored_status().get("step") or 0) >= 10, 120, "step 10", interval=0.005)
        run.send_command("stop")

    stopper = threading.Thread(target=stop_after_step_10, daemon=True)
    stopper.start()
    assert train_run_dir(run, data_dir=runs_dir) == "stopped"
    stopper.join(timeout=5)
    stopped = run.status()
    ckpt = load_checkpoint(run.last_ckpt)
    assert stopped["state"] == "stopped" and 10 <= ckpt.step < 2 * STEPS_PER_EPOCH
    assert ckpt.step == stopped["step"] == ckpt.epoch * STEPS_PER_EPOCH + ckpt.batch_in_epoch
    assert ckpt.optimizer_state is not None
    before = run.metrics()
    assert before.step.max() <= ckpt.step

    # Raise the epoch count through the control channel while stopped, then resume from the CLI.
    run.send_command("set", field="epochs", value=3)
    assert cli.main(["train", "--resume", str(run.path), "--data-dir", str(runs_dir)]) == 0
    assert "run directory:" in capsys.readouterr().out
    final = run.status()
    assert final["state"] == "finished" and final["step"] == 3 * STEPS_PER_EPOCH
    after = run.metrics().iloc[len(before):]
    train_after = after[after.split == "train"]
    assert train_after.step.min() > ckpt.step  # continued, no restart from step 0
    assert train_after.step.is_monotonic_increasing
    assert after[after.split == "val"].epoch.tolist() == [e for e in (1, 2, 3) if e > ckpt.epoch]
    events = [e["kind"] for e in run.events()]
    assert events.count("resume") == 1 and "set" in events and events[-1] == "finished"

    # Same seed, uninterrupted: mid-epoch resume replays the same batches with the same optimizer state.
    straight = make_run(runs_dir, **{**RESUMABLE, "epochs": 3})
    assert train_run_dir(straight, data_dir=runs_dir) == "finished"
    assert final["val_loss"] == pytest.approx(straight.status()["val_loss"], rel=1e-6)
    assert final["test_acc"] == pytest.approx(straight.status()["test_acc"], abs=1e-9)


def test_resume_refuses_new_settings_and_active_runs(runs_dir, capsys):
    run = make_run(runs_dir, **RESUMABLE)
    assert cli.main(["train", "--resume", str(run.path), "--set", "hidden_size=8"]) == 2
    assert f"only {', '.join(LIVE_FIELDS)} can change" in capsys.readouterr().err
    rival = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a live worker, not us
    try:
        run.write_status(state="running", pid=rival.pid, pid_started=psutil.Process(rival.pid).create_time())
        assert cli.main(["train", "--resume", str(run.path)]) == 2
        assert f"run {run.id} is still running" in capsys.readouterr().err
    finally:
        rival.kill()
        rival.wait()
    assert run.status()["state"] == "interrupted"  # its worker is gone now
    assert cli.main(["train", "--resume", "no-such-run", "--runs-dir", str(runs_dir)]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
