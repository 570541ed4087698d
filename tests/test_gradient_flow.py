"""Gradient flow through time (training/gradient_flow.py, runs/gradient_flow.py): the measurement held to PyTorch's
own modules stepped one row at a time, the file a real run writes (a plain RNN's fading gradient beside an LSTM's
carried one), recording that changes nothing trained, and a resume or a branch that continues the file without
repeating a step."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from helpers import EVERY_NET, TINY, make_run, stop_at, tiny_net, train_run

from brnn_core.checkpoint import load_checkpoint
from brnn_core.gradient_charts import flow_heatmap_figure, flow_profile_figure
from brnn_core.model import CELLS, RecurrentClassifier
from brnn_core.runs.branch import create_branch
from brnn_core.runs.gradient_flow import (
    COLUMNS,
    GradientFlowRecord,
    append_records,
    drop_from,
    profile,
    read_gradient_flow,
    run_profile,
)
from brnn_core.training.gradient_flow import measure_gradient_flow
from brnn_core.training.worker import train_run_dir
from brnn_core.unroll import directions_of, model_input

ROWS = 28


def reference_norms(model: RecurrentClassifier, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(layers * directions, rows) ‖∂ℓ/∂h_t‖ through PyTorch's own single-layer, one-way modules carrying the model's
    weights, called one row at a time with the state handed on, so every step's h is a tensor autograd can reach."""
    cfg, module = model.cfg, model.recurrent
    x, states = model_input(model, images), []
    last = {}
    for layer in range(cfg.num_layers):
        outputs = []
        for direction in directions_of(model):
            suffix = f"_l{layer}" + ("_reverse" if direction == "backward" else "")
            single = CELLS[cfg.cell](x.shape[2], cfg.hidden_size, 1, batch_first=True)
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(single, f"{name}_l0").data.copy_(getattr(module, name + suffix))
            hs, state = [None] * ROWS, None
            for t in (range(ROWS - 1, -1, -1) if direction == "backward" else range(ROWS)):
                out, state = single(x[:, t:t + 1], state)
                hs[t] = out[:, 0]  # handed on as the next step's h, so the path through time runs through it
                state = (hs[t][None], state[1]) if isinstance(state, tuple) else hs[t][None]
            states += hs
            last[direction] = hs
            outputs.append(torch.stack(hs, dim=1))
        x = torch.cat(outputs, dim=2)
    if "backward" not in last:
        feat = last["forward"][-1]
    else:
        feat = torch.cat([last["forward"][-1], last["backward"][0 if cfg.head == "bidir" else -1]], dim=1)
    loss = F.cross_entropy(model.fc(feat), labels, reduction="sum")
    grads = torch.autograd.grad(loss, states, allow_unused=True, materialize_grads=True)
    return torch.stack([g.norm(dim=1).mean() for g in grads]).view(-1, ROWS)


@pytest.mark.parametrize(("cell", "bidirectional", "head"), EVERY_NET)
def test_the_measurement_is_pytorchs_gradient_at_every_step(cell, bidirectional, head):
    model = tiny_net(cell, bidirectional, head, seed=1)
    images, labels = torch.rand(6, ROWS, 28), torch.randint(0, 10, (6,))
    records = measure_gradient_flow(model, images, labels, step=7, epoch=0.5)
    assert [(r.layer, r.direction) for r in records] == [(n, d) for n in (1, 2) for d in directions_of(model)]
    assert all(r.step == 7 and r.epoch == 0.5 and len(r.norms) == ROWS for r in records)
    expected = reference_norms(model, images, labels)
    got = torch.tensor([r.norms for r in records])
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)
    assert not any(p.grad is not None for p in model.parameters())  # nothing left on the weights


def fade(frame: pd.DataFrame, layer: int, direction: str) -> float:
    """How many times weaker the gradient is at the row a reader read first than at the row it read last."""
    line = profile(frame).query(f"layer == {layer} and direction == '{direction}'").sort_values("row")["grad_norm"]
    first, last = (line.iloc[0], line.iloc[-1]) if direction == "forward" else (line.iloc[-1], line.iloc[0])
    return last / first


def test_a_plain_rnn_fades_where_an_lstm_carries(tmp_path):
    """A tiny RNN and LSTM trained for an epoch (41 steps) record every 10 steps: the file's shape, its values
    finite and positive, and the top layer's gradient fading over the rows far more for the RNN."""
    frames = {}
    for cell in ("rnn", "lstm"):
        run, state = train_run(tmp_path / "runs", tmp_path / "data", cell=cell, hidden_size=12, num_layers=2,
                               epochs=1, drawn_share=0.0, gradient_flow_every=10)
        assert state == "finished", run.status()
        raw = pd.read_csv(run.gradient_flow_path)  # plain pandas reads it
        assert list(raw.columns) == COLUMNS
        frame = read_gradient_flow(run.gradient_flow_path)
        assert sorted(frame["step"].unique()) == [0, 10, 20, 30, 40]
        assert len(frame) == 5 * 2 * 2 * ROWS == len(raw)
        assert set(frame["direction"]) == {"forward", "backward"} and set(frame["layer"]) == {1, 2}
        assert frame.groupby(["step", "layer", "direction"])["row"].apply(sorted).map(
            lambda rows: rows == list(range(ROWS))).all()
        assert frame["grad_norm"].map(math.isfinite).all() and (frame["grad_norm"] > 0).all()
        assert frame.groupby("step")["epoch"].first().is_monotonic_increasing
        frames[cell] = frame
    for direction in ("forward", "backward"):
        assert fade(frames["rnn"], 2, direction) > 100 * fade(frames["lstm"], 2, direction), direction
    # The comparison a page draws: each run's latest profile (or its mean over the last measurements), side by side
    assert len(run_profile(run.path)) == 2 * 2 * ROWS
    recent = {cell: profile(frame, last=3) for cell, frame in frames.items()}
    assert len(recent["lstm"]) == 2 * 2 * ROWS
    fig = flow_profile_figure(recent, layer=2)
    assert [t.name for t in fig.data] == ["rnn · forward", "rnn · backward", "lstm · forward", "lstm · backward"]
    assert fig.layout.yaxis.type == "log" and all(len(t.x) == ROWS for t in fig.data)
    heat = flow_heatmap_figure(frames["rnn"], layer=1)
    assert [len(t.y) for t in heat.data] == [5, 5]  # a row per measurement, a column per image row
    top = frames["rnn"].query("layer == 1 and direction == 'forward' and step == 40").sort_values("row")
    assert list(heat.data[0].z[-1]) == pytest.approx(list(top["grad_norm"].map(math.log10)))


def test_recording_changes_nothing_that_is_trained(tmp_path):
    """The same seed with and without the probe: the same losses and the same weights, and no file when off."""
    trained = {}
    for every in (0, 1):
        run, state = train_run(tmp_path / "runs", tmp_path / "data", **{**TINY, "epochs": 1, "drawn_share": 0.0},
                               gradient_flow_every=every)
        assert state == "finished"
        trained[every] = run
    assert not trained[0].gradient_flow_path.exists()
    assert sorted(read_gradient_flow(trained[1].gradient_flow_path)["step"].unique()) == list(range(8))
    losses = [r.metrics().query("split == 'train'")["loss"].tolist() for r in trained.values()]
    assert losses[0] == losses[1]
    weights = [load_checkpoint(r.last_ckpt).model_state for r in trained.values()]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_resume_and_a_branch_continue_the_file_without_repeating_a_step(tmp_path):
    runs_dir = tmp_path / "runs"
    run = make_run(runs_dir, base={**TINY, "epochs": 2, "drawn_share": 0.0}, gradient_flow_every=2)
    assert train_run_dir(run, data_dir=runs_dir, printer=stop_at(run, 5)) == "stopped"
    assert sorted(read_gradient_flow(run.gradient_flow_path)["step"].unique()) == [0, 2, 4]
    # A worker killed after measuring at steps 6 and 8 but before it saved last.pt left their lines behind
    stale = [GradientFlowRecord(step, 0.8, 1, d, (1.0,) * ROWS) for step in (6, 8) for d in ("forward", "backward")]
    append_records(run.gradient_flow_path, stale)
    assert train_run_dir(run, data_dir=runs_dir, resume=True) == "finished"
    frame = read_gradient_flow(run.gradient_flow_path)
    assert sorted(frame["step"].unique()) == list(range(0, 16, 2))
    assert not frame.duplicated(["step", "layer", "direction", "row"]).any()
    assert (frame.query("step == 6")["grad_norm"] != 1.0).all()  # measured again on the resumed weights

    branch = create_branch(runs_dir, run.id, "last", {"epochs": 3, "lr": 0.003})
    assert train_run_dir(branch, data_dir=runs_dir) == "finished"
    steps = sorted(read_gradient_flow(branch.gradient_flow_path)["step"].unique())
    assert steps == list(range(16, 24, 2))  # the branch's own steps, on its parent's axis


def test_a_damaged_file_reads_what_is_whole(tmp_path):
    path = tmp_path / "gradient_flow.csv"
    append_records(path, [GradientFlowRecord(0, 0.0, 1, "forward", (0.5,) * ROWS)])
    with open(path, "a") as fh:
        fh.write("garbage line\n10,0.1,1,forward,0,0.3")  # a line of another shape, and a torn last line
    frame = read_gradient_flow(path)
    assert len(frame) == ROWS and (frame["grad_norm"] == 0.5).all()
    assert read_gradient_flow(tmp_path / "missing.csv").empty and profile(read_gradient_flow(path)).shape[0] == ROWS
    assert drop_from(path, 0) == ROWS + 2  # every line but the header, the damaged and the torn one too
    assert path.read_text() == ",".join(COLUMNS) + "\n"


def test_nothing_is_written_through_a_link_out_of_the_run(tmp_path):
    outside, run = tmp_path / "elsewhere.csv", tmp_path / "run"
    run.mkdir()
    outside.write_text("keep\n")
    (run / "gradient_flow.csv").symlink_to(outside)
    with pytest.raises(ValueError, match="outside its run's folder: nothing is written through it"):
        append_records(run / "gradient_flow.csv", [GradientFlowRecord(0, 0.0, 1, "forward", (0.5,) * ROWS)])
    assert outside.read_text() == "keep\n"

