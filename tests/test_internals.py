"""The LSTM's internals (brnn_core.inference.internals) held to nn.LSTM's own outputs: h at every step of every
layer's output, c at the end, for both heads, both input scales, 1-3 layers and a packed prefix; and on a real
trained checkpoint through the Predictor."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from brnn_core.inference.internals import DIRECTIONS, QUANTITIES, lstm_internals
from brnn_core.inference.predictor import Predictor
from brnn_core.model import PIXEL_MEAN, PIXEL_STD, ModelConfig, RecurrentClassifier

TOL = 1e-5


def reference(model: RecurrentClassifier, image: torch.Tensor, rows: int):
    """nn.LSTM on the first `rows` rows, packed as the model packs a prefix: (out (rows, 2H), c_n (2L, H))."""
    x = image[None].float()
    if model.cfg.input_scale == "standard":
        x = (x - PIXEL_MEAN) / PIXEL_STD
    packed = pack_padded_sequence(x, torch.tensor([rows]), batch_first=True, enforce_sorted=False)
    out, (_, c_n) = model.lstm(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out[0, :rows], c_n[:, 0]


@pytest.mark.parametrize("head", ["bidir", "last"])
@pytest.mark.parametrize("input_scale", ["standard", "unit"])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("rows", [28, 11])
def test_internals_match_nn_lstm(head, input_scale, layers, rows):
    torch.manual_seed(layers * 7 + rows)
    model = RecurrentClassifier(ModelConfig(hidden_size=12, num_layers=layers, head=head, input_scale=input_scale)).eval()
    image = torch.rand(28, 28)
    inside = lstm_internals(model, image, rows)
    out, c_n = reference(model, image, rows)
    h = model.cfg.hidden_size
    top = inside.layers[-1]
    assert inside.rows == rows and len(inside.layers) == layers
    torch.testing.assert_close(top["forward"].h, out[:, :h], atol=TOL, rtol=0)  # h at every step
    torch.testing.assert_close(top["backward"].h, out[:, h:], atol=TOL, rtol=0)
    for layer, cells in enumerate(inside.layers):  # c at the end: forward after row n-1, backward after row 0
        torch.testing.assert_close(cells["forward"].c[-1], c_n[2 * layer], atol=TOL, rtol=0)
        torch.testing.assert_close(cells["backward"].c[0], c_n[2 * layer + 1], atol=TOL, rtol=0)
        for direction in DIRECTIONS:
            for quantity in QUANTITIES:
                assert cells[direction].get(quantity).shape == (rows, h)
            gates = [cells[direction].get(q) for q in ("input", "forget", "output")]
            assert all(((g >= 0) & (g <= 1)).all() for g in gates)  # sigmoids


def test_internals_of_a_trained_checkpoint_give_its_prediction(finished, sample):
    """The recomputed last-layer states, put through the model's own head, give the Predictor's logits."""
    predictor = Predictor.from_checkpoint(finished.best_ckpt)
    model = predictor.model
    image = sample.test_x[0].float() / 255
    inside = lstm_internals(model, image)
    top, h = inside.layers[-1], model.cfg.hidden_size
    if model.cfg.head == "bidir":
        feat = torch.cat([top["forward"].h[-1], top["backward"].h[0]])
    else:
        feat = torch.cat([top["forward"].h[-1], top["backward"].h[-1]])
    with torch.no_grad():
        torch.testing.assert_close(model.fc(feat), model(image[None])[0], atol=1e-4, rtol=0)
    assert feat.shape == (2 * h,)


def test_a_bad_row_count_is_refused():
    model = RecurrentClassifier(ModelConfig(hidden_size=4, num_layers=1)).eval()
    with pytest.raises(ValueError, match="rows must be between 1 and 28"):
        lstm_internals(model, torch.rand(28, 28), 0)
    with pytest.raises(ValueError, match="unknown quantity"):
        lstm_internals(model, torch.rand(28, 28)).layers[0]["forward"].get("cell")


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


def test_a_batch_gives_each_image_its_own_internals():
    from brnn_core.inference.internals import batch_internals

    torch.manual_seed(3)
    model = RecurrentClassifier(ModelConfig(hidden_size=10, num_layers=2, input_scale="standard")).eval()
    images = torch.rand(5, 28, 28)
    batch = batch_internals(model, images)
    for k in (0, 4):
        one = lstm_internals(model, images[k])
        for layer in range(2):
            for direction in DIRECTIONS:
                for quantity in QUANTITIES:
                    torch.testing.assert_close(batch[layer][direction].get(quantity)[k],
                                               one.layers[layer][direction].get(quantity), atol=1e-6, rtol=0)
