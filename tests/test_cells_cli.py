"""A GRU and a plain RNN, one- and two-way, trained from the command line as a user would (tiny: hidden 8,
one epoch), then read back: config.json records what was used, the checkpoint rebuilds the same network, its
calibration fits its features, and its internals are PyTorch's module's own on a real digit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from helpers import run_cli

from brnn_core.checkpoint import load_checkpoint
from brnn_core.inference.predictor import Predictor
from brnn_core.model import network_name
from brnn_core.runs.rundir import Run

pytestmark = [pytest.mark.slow, pytest.mark.worker]


@pytest.mark.parametrize("cell", ["gru", "rnn"])
@pytest.mark.parametrize("direction", ["bi", "uni"])
def test_train_a_tiny_net_of_each_cell_and_direction_from_the_cli(cell, direction, runs_dir, data_dir, sample, brnn):
    two_way = direction == "bi"
    sets = [f"cell={cell}", f"bidirectional={'yes' if two_way else 'no'}", "hidden_size=8", "epochs=1",
            "drawn_share=0", "device=cpu"]
    # one in a process of its own, as typed; the others through the same cli.main here (no process start each)
    cli = run_cli if (cell, direction) == ("gru", "bi") else brnn
    result = cli(["train", *(a for s in sets for a in ("--set", s))], runs_dir, data_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    run = Run(Path(re.search(r"^run directory: (.+)$", result.stdout, re.M).group(1)))
    assert run.status()["state"] == "finished"
    train = run.config()["train"]
    assert (train["cell"], train["bidirectional"], train["head"]) == (cell, two_way, "bidir" if two_way else "last")
    ckpt = load_checkpoint(run.best_ckpt)
    mc = ckpt.model_config
    assert (mc.cell, mc.bidirectional, mc.head, mc.hidden_size) == (cell, two_way, train["head"], 8)
    assert network_name(mc) == (f"two-way {cell.upper()} (Bi{cell.upper()})" if two_way else f"one-way {cell.upper()}")

    predictor = Predictor(ckpt)
    assert predictor.calibrated  # the test report fitted a distance of this net's own feature width
    digit = sample.test_x[3].float() / 255
    assert predictor.assess(digit.numpy()).familiar is not None
    inside = predictor.internals(digit.numpy())
    with torch.no_grad():
        out, _ = predictor.model.recurrent((digit[None] - 0.1307) / 0.3081)  # input_scale standard, the default
    h = 8
    torch.testing.assert_close(inside.layers[-1]["forward"].h, out[0, :, :h], atol=1e-5, rtol=0)
    if two_way:
        torch.testing.assert_close(inside.layers[-1]["backward"].h, out[0, :, h:], atol=1e-5, rtol=0)
    else:
        assert list(inside.layers[-1]) == ["forward"]
    with torch.no_grad():
        torch.testing.assert_close(predictor.model.fc(inside.final()), predictor.model(digit[None])[0], atol=1e-5,
                                   rtol=0)
