"""The Predict page's "Inside the LSTM" expander (ui/inside.py) in AppTest, on a real checkpoint and a real
MNIST digit: nothing computed while closed; opened, the heatmap for each quantity, the rows that mattered, the
attribution from each baseline and the random-weights sanity check."""

from __future__ import annotations

import json

from helpers import build_app, no_exception, rerun_until, wait_for

from brnn_core.inference.state_space import activations_path, states_path
from ui.inside import states_builder


def panel(checkpoint: str, digit: list, data_dir: str) -> None:
    from pathlib import Path

    import numpy as np

    from brnn_core.inference.predictor import Predictor
    from ui.explaining import Explanations
    from ui.inside import inside_panel

    predictor = Predictor.from_checkpoint(checkpoint)
    x = np.asarray(digit, dtype=np.float32)
    explain = Explanations(checkpoint, x)
    inside_panel(predictor, x, int(np.argmax(predictor.predict(x))), checkpoint, Path(data_dir), explain)
    explain.wait()


def charts(at) -> int:
    return len(at.get("plotly_chart"))


def test_inside_a_one_way_gru(gru_one_way, sample, tmp_path):
    """A GRU's own quantities with a sentence each, one direction and no direction to pick, its path and matches."""
    digit = (sample.test_x[1].float() / 255).tolist()
    checkpoint = tmp_path / "best.pt"
    checkpoint.write_bytes(gru_one_way.best_ckpt.read_bytes())
    at = build_app(function=panel, args=(str(checkpoint), digit, str(tmp_path / "data")))
    at.run()
    assert at.expander[0].label.startswith("Inside the one-way GRU: gates and states row by row")
    at.session_state["inside_open"] = True
    at.session_state["inside_quantity"] = "forget"  # picked on an LSTM before: a GRU has none
    at.session_state["inside_direction"] = "backward"
    at.run()
    no_exception(at)
    rerun_until(at, lambda a: charts(a) == 2, "the heatmap and the rows that mattered, worked out in the background")
    quantity = at.selectbox(key="inside_quantity")
    assert quantity.value == "h"
    assert quantity.options == ["hidden state h", "reset gate r", "update gate z", "candidate n"]
    assert not [s for s in at.selectbox if s.key == "inside_direction"]  # one-way: nothing to pick
    assert any(c.value.startswith("Direction: forward (one-way") for c in at.caption)
    assert any("a one-way net has only this direction" in c.value for c in at.caption)
    for name, words in (("update", "How much of the previous state is kept"), ("reset", "made from this row alone"),
                        ("candidate", "The new state each row proposes")):
        at.selectbox(key="inside_quantity").select(name).run()
        no_exception(at, name)
        assert any(words in c.value for c in at.caption), name
        titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
        assert f"{name} · layer 2, forward" in titles, titles
    wait_for(lambda: states_path(checkpoint).is_file() and not states_builder().jobs.pending(), 120,
             "the training states beside the checkpoint")
    at.selectbox(key="inside_quantity").select("h").run()
    no_exception(at)
    near = "Nearest training digits by the state that has read the whole digit (after the last row). The number"
    assert any(c.value.startswith(near) for c in at.caption)
    assert len(at.get("plotly_chart")) == 3  # heatmap, rows that mattered, the path


def test_inside_the_lstm(finished, sample, tmp_path):
    digit = (sample.test_x[0].float() / 255).tolist()
    checkpoint = tmp_path / "best.pt"  # its training digits' states are written beside it
    checkpoint.write_bytes(finished.best_ckpt.read_bytes())
    at = build_app(function=panel, args=(str(checkpoint), digit, str(tmp_path / "data")))
    at.run()
    no_exception(at)
    assert not at.get("plotly_chart")  # closed: nothing computed
    at.session_state["inside_open"] = True
    at.run()
    no_exception(at)
    # worked out in the background: said so in their place until they are there
    rerun_until(at, lambda a: charts(a) == 2, "the heatmap and the rows that mattered")
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("layer" in t and ", forward" in t for t in titles) and any("Rows that mattered" in t for t in titles)
    read = "At row t the forward direction of the two-way LSTM (BiLSTM) has read rows 0..t"
    assert any(read in c.value for c in at.caption)
    # one plain sentence for each panel: what it shows, what to look for, and the unit of the rows' bars
    assert any("What the layer passes on after each row" in c.value for c in at.caption)
    assert any("log-odds for" in c.value and "2.3 means the odds fell tenfold" in c.value for c in at.caption)
    # the training digits' states: built once in the background, then the path, neighbours and matches
    assert any("Reading the training digits' states once" in c.value for c in at.caption)
    wait_for(lambda: states_path(checkpoint).is_file() and not states_builder().jobs.pending(), 120,
             "the training states beside the checkpoint")
    at.run()
    no_exception(at)
    assert len(at.get("plotly_chart")) == 3  # + the path through state space
    assert any("Nearest training digits" in c.value and "straight-line distance across all 32 units" in c.value
               and "0 is the same state and 11 the farthest possible" in c.value for c in at.caption)
    assert len(at.get("image")) >= 8  # the nearest training digits (and the matches)
    assert any("forward hidden state h are on" in c.value or "No unit of" in c.value for c in at.caption)
    # the match follows the heatmap's layer, direction and quantity: another one is read once, in the background
    at.selectbox(key="inside_layer").select(1)
    at.selectbox(key="inside_quantity").select("forget").run()
    no_exception(at)
    assert any("values of this layer, direction and quantity once" in c.value for c in at.caption)
    wait_for(lambda: activations_path(checkpoint, 0, "forward", "forget").is_file()
             and not states_builder().jobs.pending(), 120, "the training digits' forget gates")
    at.run()
    assert any("layer 1's forward forget gate f are on" in c.value or "No unit of layer 1" in c.value
               for c in at.caption)
    for quantity, hint in (("c", "The cell's memory."), ("candidate", "What each row would write into memory")):
        at.selectbox(key="inside_quantity").select(quantity).run()
        no_exception(at, quantity)
        assert any(hint in c.value for c in at.caption)
    at.selectbox(key="inside_direction").select("backward").run()
    assert any("bottom up" in c.value for c in at.caption)
    at.radio(key="inside_baseline").set_value("blurred").run()
    rerun_until(at, lambda a: charts(a) == 4, "the attribution from a blurred baseline")
    at.toggle(key="inside_sanity").set_value(True).run()
    no_exception(at)
    rerun_until(at, lambda a: charts(a) == 5, "the random-weights attribution")
    assert any(c.value.startswith("Correlation between the two maps:") for c in at.caption)
