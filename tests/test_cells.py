"""LSTM, GRU and plain RNN, two-way and one-way: the model, its checkpoints (and every checkpoint made before
cells existed, which loads as the two-way LSTM it is), mixed precision, the look inside, and what runs,
branches, Teach it and the runs table make of a cell. Training from the command line: test_cells_cli.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import copy_run
from torch import nn

from brnn_core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.devices import cpu_has_bf16
from brnn_core.inference.explain import integrated_gradients, prefix_probabilities, row_importance
from brnn_core.inference.predictor import Predictor
from brnn_core.inference.state_space import TrainingStates
from brnn_core.model import ModelConfig, RecurrentClassifier, network_name
from brnn_core.runs.branch import BranchError, plan_branch
from brnn_core.runs.export import long_table
from brnn_core.runs.filter import filter_table
from brnn_core.runs.index import RunIndex
from brnn_core.training import engine

CELLS = ("lstm", "gru", "rnn")
CLASSES = [str(i) for i in range(10)]
BLOCKS = {"lstm": 4, "gru": 3, "rnn": 1}


def model_of(cell: str, bidirectional: bool = True, seed: int = 0, **kw) -> RecurrentClassifier:
    torch.manual_seed(seed)
    head = kw.pop("head", "bidir" if bidirectional else "last")
    return RecurrentClassifier(ModelConfig(**{"hidden_size": 8, "num_layers": 2, "cell": cell,
                                              "bidirectional": bidirectional, "head": head, **kw}))


def logits(model: nn.Module, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad(), engine.mode(model, False):
        return model(x, lengths)


# ------------------------------------------------------------------ the model
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_each_cell_is_pytorchs_own_module_named_after_it(cell, bidirectional):
    model = model_of(cell, bidirectional)
    module = model.recurrent
    assert type(module) is {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[cell]
    assert module.bidirectional is bidirectional
    assert getattr(model, cell) is module and set(dict(model.named_children())) == {cell, "fc"}
    names = set(model.state_dict())
    assert f"{cell}.weight_ih_l1" in names and (f"{cell}.weight_ih_l0_reverse" in names) is bidirectional
    assert model.fc.in_features == model.cfg.state_size == (2 if bidirectional else 1) * 8
    assert module.weight_ih_l0.shape == (BLOCKS[cell] * 8, 28)
    assert cell != "rnn" or module.nonlinearity == "tanh"  # Elman's
    x = torch.rand(3, 28, 28)
    assert logits(model, x).shape == (3, 10)
    # a packed prefix (the row-by-row reading) is the same as the shorter image itself
    torch.testing.assert_close(logits(model, x, torch.tensor([28, 9, 1])),
                               torch.cat([logits(model, x[:1]), logits(model, x[1:2, :9]), logits(model, x[2:, :1])]),
                               atol=1e-5, rtol=0)


def test_the_forget_gate_bias_starts_open_in_an_lstm_only():
    lstm, gru = model_of("lstm"), model_of("gru")
    assert (lstm.lstm.bias_ih_l0[8:16] == 1).all() and (lstm.lstm.bias_ih_l1_reverse[8:16] == 1).all()
    assert not (gru.gru.bias_ih_l0[8:16] == 1).all()  # a GRU's second block is its update gate: PyTorch's init


@pytest.mark.parametrize("cell", CELLS)
def test_a_one_way_net_reads_its_last_rows_state(cell):
    model = model_of(cell, False).eval()
    x = torch.rand(2, 28, 28)
    with torch.no_grad():
        out, _ = model.recurrent(x)
        torch.testing.assert_close(model.fc(out[:, -1]), model(x), atol=1e-6, rtol=0)


def test_the_network_is_named_for_every_page():
    assert network_name(ModelConfig()) == "two-way LSTM (BiLSTM)"
    assert network_name(ModelConfig(cell="gru", bidirectional=False, head="last")) == "one-way GRU"
    assert network_name(TrainConfig(cell="rnn")) == "two-way RNN (BiRNN)"


@pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no native bf16: bf16 autocast is refused here")
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_mixed_precision_trains_and_evaluates_every_cell(cell, bidirectional):
    """bf16 autocast: CPU autocast runs nn.GRU in fp32 and nn.LSTM / nn.RNN in bf16; the head takes either."""
    model = model_of(cell, bidirectional, num_layers=2)
    torch.manual_seed(1)
    x, y = torch.randint(0, 256, (48, 28, 28), dtype=torch.uint8), torch.randint(0, 10, (48,))
    opt = engine.make_optimizer(model.parameters(), "adam", 0.01)
    result = engine.fit(model, opt, x[:32], y[:32], x[32:], y[32:], epochs=1, batch_size=16, seed=0, amp="bf16")
    assert result.state == "finished" and np.isfinite(result.last_val.loss)
    assert np.isfinite(engine.evaluate(model, x[32:], y[32:], amp="bf16").loss)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lengths = torch.tensor([28, 5])
        assert model(x[:2].float() / 255, lengths).dtype == torch.float32  # the packed path too
    assert all(p.dtype == torch.float32 for p in model.parameters())


# ------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_a_checkpoint_records_its_cell_and_direction(tmp_path, cell, bidirectional):
    model = model_of(cell, bidirectional, seed=2)
    save_checkpoint(tmp_path / "c.pt", model, classes=CLASSES)
    stored = torch.load(tmp_path / "c.pt", weights_only=True)
    assert (stored["model_config"]["cell"], stored["model_config"]["bidirectional"]) == (cell, bidirectional)
    ckpt = load_checkpoint(tmp_path / "c.pt")
    assert ckpt.model_config == model.cfg
    x = torch.rand(4, 28, 28)
    assert torch.equal(logits(ckpt.build_model(), x), logits(model, x))


def test_a_checkpoint_from_before_cells_loads_as_the_two_way_lstm_it_is(tmp_path):
    """A file as the dashboard wrote it before cell and bidirectional existed: its header has neither key."""
    model = model_of("lstm", seed=4, input_scale="standard")
    header = {k: v for k, v in model.cfg.to_dict().items() if k not in ("cell", "bidirectional")}
    old = {"format": "brnn-checkpoint", "format_version": 1, "model_config": header, "classes": CLASSES,
           "model_state": {k: v.clone() for k, v in model.state_dict().items()}, "train_config": {"lr": 0.01},
           "epoch": 1, "step": 41, "metrics": {}}
    torch.save(old, tmp_path / "old.pt")
    ckpt = load_checkpoint(tmp_path / "old.pt")
    assert (ckpt.model_config.cell, ckpt.model_config.bidirectional) == ("lstm", True) and not ckpt.bare
    x = torch.rand(3, 28, 28)
    assert torch.equal(logits(ckpt.build_model(), x), logits(model, x))
    assert set(ckpt.build_model().state_dict()) == set(old["model_state"])  # lstm.* as it was


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_a_bare_state_dict_says_which_cell_and_direction_it_is(tmp_path, cell, bidirectional):
    model = model_of(cell, bidirectional, seed=5, num_layers=3, head="last")
    torch.save(model.state_dict(), tmp_path / "bare.pt")
    ckpt = load_checkpoint(tmp_path / "bare.pt")
    assert ckpt.bare and ckpt.model_config == ModelConfig(hidden_size=8, num_layers=3, cell=cell,
                                                          bidirectional=bidirectional, head="last")
    x = torch.rand(3, 28, 28)
    assert torch.equal(logits(ckpt.build_model(), x), logits(model, x))


@pytest.mark.parametrize(("change", "words"), [
    ({"cell": "tcn"}, "model_config.cell is 'tcn', expected one of lstm, gru, rnn"),
    ({"bidirectional": "yes"}, "model_config.bidirectional is 'yes', expected true or false"),
    ({"head": "bidir", "bidirectional": False}, "head is bidir for a one-way model"),
    ({"cell": "gru"}, "does not fit its tensors"),  # an LSTM's weights under a GRU's header
])
def test_a_header_that_names_another_architecture_is_refused(tmp_path, change, words):
    save_checkpoint(tmp_path / "c.pt", model_of("lstm"), classes=CLASSES)
    obj = torch.load(tmp_path / "c.pt", weights_only=True)
    obj["model_config"].update(change)
    torch.save(obj, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=words):
        load_checkpoint(tmp_path / "bad.pt")


# ------------------------------------------------------------------ the look inside, for each cell
@pytest.mark.parametrize(("cell", "bidirectional"), [("gru", True), ("gru", False), ("rnn", False), ("lstm", False)])
def test_reading_attribution_and_state_space_work_for_every_cell(tmp_path, cell, bidirectional, sample):
    model = model_of(cell, bidirectional, seed=6, input_scale="standard")
    save_checkpoint(tmp_path / "c.pt", model, classes=CLASSES)
    predictor = Predictor.from_checkpoint(tmp_path / "c.pt")
    digit = sample.test_x[0].float() / 255
    rows = prefix_probabilities(predictor.model, digit)
    assert rows.shape == (28, 10) and np.allclose(rows[-1], predictor.predict(digit.numpy()), atol=1e-5)
    attribution, target, gap = integrated_gradients(predictor.model, digit)
    assert attribution.shape == (28, 28) and (attribution[digit.numpy() == 0] == 0).all()
    assert row_importance(predictor.model, digit, target).shape == (28,)
    inside = predictor.internals(digit.numpy())
    assert tuple(inside.layers[0]) == (("forward", "backward") if bidirectional else ("forward",))
    states = TrainingStates.build(predictor.model, sample.train_x[:60], sample.train_y[:60], 10, sample=40)
    d = 2 if bidirectional else 1
    assert states.h.shape == (40, 28, d * 8) and states.final.shape == (40, d * 8) and states.hidden_size == 8
    near = states.neighbours(inside.final().numpy(), 3)
    assert len(near) == 3 and near[0].distance <= near[-1].distance
    units, found = states.matches(inside.layers[-1]["forward"].h.numpy(), "forward", (5, 20), 0.0, k=4)
    assert len(found) == 4
    assessed = predictor.assess(digit.numpy())
    assert assessed.probs.shape == (10,) and assessed.familiar is None  # no calibration stored in this file


# ------------------------------------------------------------------ runs: old ones, branches, the table
def _as_before_cells(run) -> None:
    """Rewrite a run's config.json as a version before cell and bidirectional wrote it."""
    config = json.loads(run.config_path.read_text())
    config["train"] = {k: v for k, v in config["train"].items() if k not in ("cell", "bidirectional")}
    run.config_path.write_text(json.dumps(config))


def test_an_old_run_lists_filters_and_exports_as_a_two_way_lstm(finished, runs_dir):
    old, gru = copy_run(finished, runs_dir, f"{finished.id}-old"), copy_run(finished, runs_dir, f"{finished.id}-gru")
    _as_before_cells(old)
    config = json.loads(gru.config_path.read_text())
    config["train"].update(cell="gru", bidirectional=False, head="last")
    gru.config_path.write_text(json.dumps(config))
    table = RunIndex(runs_dir).table()
    rows = table.set_index("run_id")
    assert (rows.loc[old.id, "cell"], rows.loc[old.id, "bidirectional"]) == ("lstm", True)
    assert (rows.loc[gru.id, "cell"], rows.loc[gru.id, "bidirectional"]) == ("gru", False)
    assert list(filter_table(table, 'cell == "gru"')["run_id"]) == [gru.id]
    assert list(filter_table(table, "bidirectional == false")["run_id"]) == [gru.id]
    assert list(filter_table(table, "bidirectional == yes and cell == lstm")["run_id"]) == [old.id]
    frame = long_table(runs_dir, table)
    by_run = frame.groupby("run_id").first()
    assert (by_run.loc[old.id, "train.cell"], bool(by_run.loc[old.id, "train.bidirectional"])) == ("lstm", True)
    assert by_run.loc[gru.id, "train.cell"] == "gru"


def test_an_old_run_branches_as_a_two_way_lstm_and_no_branch_changes_its_cell(finished, runs_dir):
    parent = copy_run(finished, runs_dir)
    _as_before_cells(parent)
    plan = plan_branch(runs_dir, parent.id, "best", {"lr": 0.001})
    assert (plan.cfg.cell, plan.cfg.bidirectional, plan.cfg.head) == ("lstm", True, "bidir")
    with pytest.raises(BranchError, match=r"cell: a branch keeps its parent's architecture \(cell=lstm\).*"
                                          r"--set cell=gru"):
        plan_branch(runs_dir, parent.id, "best", {"cell": "gru"})
    with pytest.raises(BranchError, match=r"bidirectional: a branch keeps its parent's architecture "
                                          r"\(bidirectional=true\).*--set bidirectional=false"):
        plan_branch(runs_dir, parent.id, "best", {"bidirectional": "false"})
