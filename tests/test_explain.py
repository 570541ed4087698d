"""Looking inside the BiLSTM: row-by-row predictions (read_rows) and integrated-gradients attribution.

The attribution's backward pass runs through the LSTM in eval mode; on CUDA cuDNN refuses that (the
blog's bug). The suite's cuDNN-like fake (test_model_engine.CudnnLikeLSTM) gives the CPU LSTM that rule.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_inference import SEVEN, drawing
from test_model_engine import CUDNN_MESSAGE, CudnnLikeLSTM

from brnn_core.checkpoint import Checkpoint
from brnn_core.data.batching import to_input
from brnn_core.data.canvas import prepare
from brnn_core.inference.explain import integrated_gradients, prefix_probabilities
from brnn_core.inference.predictor import Predictor
from brnn_core.model import ModelConfig, RecurrentClassifier, mode

SEVEN_CANVAS = drawing([SEVEN])


def random_predictor(head: str, dropout: float = 0.0, seed: int = 0) -> Predictor:
    torch.manual_seed(seed)
    cfg = ModelConfig(hidden_size=16, num_layers=2, head=head, dropout=dropout)
    model = RecurrentClassifier(cfg)
    return Predictor(Checkpoint(cfg, model.state_dict(), [str(i) for i in range(10)]))


def logits(predictor: Predictor, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), mode(predictor.model, False):
        return predictor.model(x.unsqueeze(0))[0]  # (C,)


# ------------------------------------------------------------------ read_rows
@pytest.mark.parametrize("head", ["bidir", "last"])
def test_each_row_is_the_model_on_that_prefix_alone(head):
    """Row t of the packed batch = the model run on a 28x(t+1) image, for both heads."""
    predictor = random_predictor(head)
    x = prepare(SEVEN_CANVAS, deslant=predictor.deslant)  # what the predictor feeds its model
    rows = predictor.read_rows(SEVEN_CANVAS)
    with torch.no_grad(), mode(predictor.model, False):
        one_by_one = np.stack([predictor.model(x[:t + 1].unsqueeze(0)).softmax(1)[0].numpy() for t in range(28)])
    assert rows.shape == (28, 10)
    np.testing.assert_allclose(rows, one_by_one, atol=1e-6)
    # The prefixes really differ: a model that has read one row does not answer as one that read all 28.
    assert np.abs(rows[0] - rows[-1]).max() > 1e-3


def test_read_rows_of_a_trained_model(trained_ckpt, sample):
    predictor = Predictor.from_checkpoint(trained_ckpt)
    for image in (SEVEN_CANVAS, sample.test_x[0].numpy()):
        rows = predictor.read_rows(image)
        assert rows.shape == (28, 10) and rows.dtype == np.float32
        np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(rows[-1], predictor.predict(image), atol=1e-6)
    # The drawn 7 is a 7 once the model has read it all; after only its top bar it is not yet sure.
    rows = predictor.read_rows(SEVEN_CANVAS)
    assert int(rows[-1].argmax()) == 7
    assert rows[-1, 7] > rows[5, 7] + 0.2, rows[:, 7]


def test_blank_canvas_reads_nothing(trained_ckpt):
    predictor = Predictor.from_checkpoint(trained_ckpt)
    blank = np.zeros((280, 280, 4), np.uint8)
    assert predictor.read_rows(blank) is None
    assert predictor.attribution(blank) is None


def test_bare_state_dict_reads_rows_and_attributes(trained_ckpt, tmp_path):
    """The blog's model.ckpt: a bare state_dict, head inferred as 'last'."""
    state = Predictor.from_checkpoint(trained_ckpt).model.state_dict()
    torch.save(state, tmp_path / "model.ckpt")
    predictor = Predictor.from_checkpoint(tmp_path / "model.ckpt")
    assert predictor.checkpoint.bare and predictor.checkpoint.model_config.head == "last"
    rows = predictor.read_rows(SEVEN_CANVAS)
    np.testing.assert_allclose(rows[-1], predictor.predict(SEVEN_CANVAS), atol=1e-6)
    attr = predictor.attribution(SEVEN_CANVAS)
    assert attr.shape == (28, 28) and np.isfinite(attr).all() and np.abs(attr).sum() > 0


# ------------------------------------------------------------------ attribution
def ink_share(attr: np.ndarray, x: torch.Tensor, threshold: float = 0.1) -> float:
    return float(np.abs(attr)[x.numpy() >= threshold].sum() / np.abs(attr).sum())


def test_attribution_sits_on_the_ink_and_adds_up(trained_ckpt, sample):
    predictor = Predictor.from_checkpoint(trained_ckpt)
    for image in (SEVEN_CANVAS, sample.test_x[7].numpy()):
        x = prepare(image, deslant=predictor.deslant)
        attr = predictor.attribution(image)
        assert attr.shape == (28, 28) and attr.dtype == np.float32 and np.isfinite(attr).all()
        assert ink_share(attr, x) > 0.9, ink_share(attr, x)
        assert np.all(attr[x.numpy() == 0] == 0)  # black baseline: a black pixel carries nothing
        # Completeness: the attributions add up to the logit's change from a black image to this one.
        target = int(predictor.predict(image).argmax())
        change = float(logits(predictor, x)[target] - logits(predictor, torch.zeros(28, 28))[target])
        assert attr.sum() == pytest.approx(change, rel=0.05, abs=0.05), (attr.sum(), change)


def test_attribution_for_a_given_class(trained_ckpt):
    predictor = Predictor.from_checkpoint(trained_ckpt)
    x = prepare(SEVEN_CANVAS, deslant=predictor.deslant)  # what the predictor feeds its model
    attr, target, gap = integrated_gradients(predictor.model, x, target=1)
    assert target == 1
    change = float(logits(predictor, x)[1] - logits(predictor, torch.zeros(28, 28))[1])
    assert attr.sum() == pytest.approx(change, abs=gap + 1e-4)
    np.testing.assert_allclose(predictor.attribution(SEVEN_CANVAS, target=1), attr, atol=1e-6)
    assert not np.allclose(predictor.attribution(SEVEN_CANVAS, target=7), attr)
    with pytest.raises(ValueError, match="target 10 is not a class of this model; use 0 to 9"):
        predictor.attribution(SEVEN_CANVAS, target=10)


def test_attribution_keeps_eval_mode_so_dropout_stays_off():
    """Training mode would make two calls differ (dropout) and explain another function."""
    predictor = random_predictor("bidir", dropout=0.5)
    predictor.model.train()  # whatever mode the caller left it in, attribution runs in eval mode
    x = prepare(SEVEN_CANVAS, deslant=predictor.deslant)  # what the predictor feeds its model
    first, second = predictor.attribution(SEVEN_CANVAS), predictor.attribution(SEVEN_CANVAS)
    np.testing.assert_array_equal(first, second)
    target = int(predictor.predict(SEVEN_CANVAS).argmax())
    change = float(logits(predictor, x)[target] - logits(predictor, torch.zeros(28, 28))[target])
    assert first.sum() == pytest.approx(change, rel=0.05, abs=0.02)
    assert predictor.model.training  # and gives the caller's mode back


def test_attribution_on_a_cudnn_like_lstm(trained_ckpt, sample):
    """cuDNN refuses backward in eval mode; attribution switches cuDNN off for its call and stays in eval."""
    predictor = Predictor.from_checkpoint(trained_ckpt)
    plain = predictor.attribution(SEVEN_CANVAS)
    predictor.model.lstm = CudnnLikeLSTM(predictor.model.lstm)
    model = predictor.model
    # The harness refuses a plain eval-mode backward, exactly as cuDNN does on a GPU...
    with mode(model, False):
        loss = F.cross_entropy(model(to_input(sample.test_x[:4])), sample.test_y[:4])
    with pytest.raises(RuntimeError, match=CUDNN_MESSAGE):
        loss.backward()
    # ...and attribution still works on it, with the same numbers.
    np.testing.assert_allclose(predictor.attribution(SEVEN_CANVAS), plain, atol=1e-6)
    assert torch.backends.cudnn.enabled  # switched back on after the call


def test_prefix_probabilities_on_the_model_device_returns_numpy():
    predictor = random_predictor("last")
    out = prefix_probabilities(predictor.model, torch.rand(28, 28))
    assert isinstance(out, np.ndarray) and out.shape == (28, 10)
