"""The internals of every cell (brnn_core.inference.internals) held to PyTorch's own modules: nn.LSTM, nn.GRU and
nn.RNN, one- and two-way, 1-3 layers, a packed prefix: h at every step of the last layer's output, every layer's
final h (and an LSTM's c), and the gates consistent with the cell's equations; on a real trained checkpoint through
the Predictor."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from brnn_core.inference.internals import QUANTITIES, batch_internals, directions_of, model_internals
from brnn_core.inference.predictor import Predictor
from brnn_core.model import PIXEL_MEAN, PIXEL_STD, ModelConfig, RecurrentClassifier

TOL = 1e-5
SIGMOIDS = {"lstm": ("input", "forget", "output"), "gru": ("reset", "update"), "rnn": ()}


def reference(model: RecurrentClassifier, image: torch.Tensor, rows: int):
    """The module on the first `rows` rows, packed as the model packs a prefix: (out (rows, D*H), h_n (L*D, H),
    c_n (L*D, H) or None)."""
    x = image[None].float()
    if model.cfg.input_scale == "standard":
        x = (x - PIXEL_MEAN) / PIXEL_STD
    packed = pack_padded_sequence(x, torch.tensor([rows]), batch_first=True, enforce_sorted=False)
    out, state = model.recurrent(packed)
    h_n, c_n = state if isinstance(state, tuple) else (state, None)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out[0, :rows], h_n[:, 0], None if c_n is None else c_n[:, 0]


def tiny(cell: str, bidirectional: bool, layers: int = 2, hidden: int = 12, **kw) -> RecurrentClassifier:
    cfg = ModelConfig(hidden_size=hidden, num_layers=layers, cell=cell, bidirectional=bidirectional,
                      head=kw.pop("head", "bidir" if bidirectional else "last"), **kw)
    return RecurrentClassifier(cfg).eval()


def check_equations(cell: str, cells, reverse: bool) -> None:
    """The returned gates make the returned h, step by step (GRU: h' = (1 - z) n + z h; LSTM: h = o tanh(c))."""
    h = cells.h
    previous = torch.cat([h[1:], torch.zeros_like(h[:1])]) if reverse else torch.cat([torch.zeros_like(h[:1]), h[:-1]])
    if cell == "gru":
        z, n = cells.get("update"), cells.get("candidate")
        torch.testing.assert_close(h, (1 - z) * n + z * previous, atol=TOL, rtol=0)
    if cell == "lstm":
        torch.testing.assert_close(h, cells.get("output") * torch.tanh(cells.get("c")), atol=TOL, rtol=0)
    for gate in SIGMOIDS[cell]:
        assert ((cells.get(gate) >= 0) & (cells.get(gate) <= 1)).all()


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("rows", [28, 11])
def test_internals_match_pytorchs_module(cell, bidirectional, layers, rows):
    torch.manual_seed(layers * 7 + rows)
    scale = "standard" if (layers + rows) % 2 else "unit"  # both input scales across the cases
    model = tiny(cell, bidirectional, layers, input_scale=scale)
    image = torch.rand(28, 28)
    inside = model_internals(model, image, rows)
    out, h_n, c_n = reference(model, image, rows)
    h, directions = model.cfg.hidden_size, directions_of(model)
    assert directions == (("forward", "backward") if bidirectional else ("forward",))
    assert inside.rows == rows and len(inside.layers) == layers
    top = inside.layers[-1]
    torch.testing.assert_close(top["forward"].h, out[:, :h], atol=TOL, rtol=0)  # h at every step
    if bidirectional:
        torch.testing.assert_close(top["backward"].h, out[:, h:], atol=TOL, rtol=0)
    torch.testing.assert_close(inside.final(), torch.cat([out[-1, :h], out[0, h:]]), atol=TOL, rtol=0)
    d = len(directions)
    for layer, cells in enumerate(inside.layers):  # every layer's end: forward after row n-1, backward after row 0
        assert tuple(cells) == directions
        ends = {"forward": -1, "backward": 0}
        for k, direction in enumerate(directions):
            torch.testing.assert_close(cells[direction].h[ends[direction]], h_n[d * layer + k], atol=TOL, rtol=0)
            if c_n is not None:
                torch.testing.assert_close(cells[direction].get("c")[ends[direction]], c_n[d * layer + k], atol=TOL,
                                           rtol=0)
            assert cells[direction].quantities == QUANTITIES[cell]
            assert all(cells[direction].get(q).shape == (rows, h) for q in QUANTITIES[cell])
            check_equations(cell, cells[direction], reverse=direction == "backward")


def test_internals_of_a_trained_checkpoint_give_its_prediction(finished, sample):
    """The recomputed last-layer states, put through the model's own head, give the Predictor's logits."""
    predictor = Predictor.from_checkpoint(finished.best_ckpt)
    model = predictor.model
    image = sample.test_x[0].float() / 255
    inside = model_internals(model, image)
    top, h = inside.layers[-1], model.cfg.hidden_size
    last = torch.cat([top["forward"].h[-1], top["backward"].h[-1]])  # the blog's head: both at the last row
    feat = inside.final() if model.cfg.head == "bidir" else last
    with torch.no_grad():
        torch.testing.assert_close(model.fc(feat), model(image[None])[0], atol=1e-4, rtol=0)
    assert feat.shape == (2 * h,)


@pytest.mark.parametrize("cell", ["gru", "rnn"])
def test_a_one_way_nets_final_state_is_what_its_head_reads(cell):
    torch.manual_seed(5)
    model = tiny(cell, False, 2)
    image = torch.rand(28, 28)
    inside = model_internals(model, image)
    assert inside.final().shape == (12,)
    with torch.no_grad():
        torch.testing.assert_close(model.fc(inside.final()), model(image[None])[0], atol=1e-5, rtol=0)


def test_a_bad_row_count_or_quantity_is_refused():
    model = tiny("lstm", True, 1, hidden=4)
    with pytest.raises(ValueError, match="rows must be between 1 and 28"):
        model_internals(model, torch.rand(28, 28), 0)
    with pytest.raises(ValueError, match="unknown quantity 'cell'; choose one of h, c, input"):
        model_internals(model, torch.rand(28, 28)).layers[0]["forward"].get("cell")
    with pytest.raises(ValueError, match="unknown quantity 'c'; choose one of h, reset, update, candidate"):
        model_internals(tiny("gru", True, 1, hidden=4), torch.rand(28, 28)).layers[0]["forward"].get("c")


def test_the_predictor_gives_none_for_a_blank_canvas_and_rows_for_a_digit(finished, sample):
    import numpy as np

    predictor = Predictor.from_checkpoint(finished.best_ckpt)
    blank = np.zeros((280, 280, 4), np.uint8)  # an empty canvas
    assert predictor.internals(blank) is None and predictor.row_importance(blank) is None
    digit = (sample.test_x[0].float() / 255).numpy()
    inside = predictor.internals(digit)
    assert inside.rows == 28 and len(inside.layers) == predictor.checkpoint.model_config.num_layers
    drop = predictor.row_importance(digit)
    assert drop.shape == (28,) and (drop[digit.sum(axis=1) == 0] == 0).all()


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_batch_gives_each_image_its_own_internals(cell):
    torch.manual_seed(3)
    model = tiny(cell, True, 2, hidden=10, input_scale="standard")
    images = torch.rand(5, 28, 28)
    batch = batch_internals(model, images)
    for k in (0, 4):
        one = model_internals(model, images[k])
        for layer in range(2):
            for direction in ("forward", "backward"):
                for quantity in QUANTITIES[cell]:
                    torch.testing.assert_close(batch[layer][direction].get(quantity)[k],
                                               one.layers[layer][direction].get(quantity), atol=1e-6, rtol=0)
