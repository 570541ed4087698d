"""What each direction drew on (inference/saliency.py): the predicted logit's input gradient split between the
readers. The parts add up to the whole logit's gradient for every cell, direction and head; on the shared trained
BiLSTM the backward reader leans on the top rows, the forward one on the bottom; and the backward pass runs in eval
mode on a cuDNN-like LSTM, as attribution does, without the blog's crash. The Predict page's chart and caption in
AppTest."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import EVERY_NET, build_app, no_exception, rerun_until, tiny_net
from test_model_engine import CUDNN_MESSAGE, CudnnLikeLSTM

from brnn_core.data.batching import to_input
from brnn_core.inference.predictor import Predictor
from brnn_core.inference.saliency import direction_saliency
from brnn_core.model import RecurrentClassifier, mode


def whole_gradient(model: RecurrentClassifier, x: torch.Tensor, target: int) -> np.ndarray:
    """The gradient of the model's own logit for `target` with respect to the image, computed in one piece."""
    inp = x[None].clone().requires_grad_(True)
    with mode(model, False):
        logit = model(inp)[0, target]
    return torch.autograd.grad(logit, inp)[0][0].numpy()


@pytest.mark.parametrize(("cell", "bidirectional", "head"), EVERY_NET)
def test_the_readers_parts_add_up_to_the_whole_logits_gradient(cell, bidirectional, head):
    model = tiny_net(cell, bidirectional, head, seed=2)
    model.train()  # whatever the caller left: the split is of the eval-mode answer, and the mode is given back
    x = torch.rand(28, 28)
    split = direction_saliency(model, x)
    assert model.training
    assert list(split.parts) == (["forward", "backward"] if bidirectional else ["forward"])
    whole = whole_gradient(model, x, split.target)
    np.testing.assert_allclose(sum(split.parts.values()), whole, rtol=0, atol=1e-6 * np.abs(whole).max())
    np.testing.assert_allclose(split.whole, whole, rtol=0, atol=1e-6 * np.abs(whole).max())
    rows = split.rows()
    assert all(r.shape == (28,) and (r >= 0).all() for r in rows.values())
    np.testing.assert_allclose(rows["forward"], np.linalg.norm(split.parts["forward"], axis=1))
    if bidirectional:  # two readers, each with a share of its own
        assert not np.allclose(split.parts["forward"], split.parts["backward"])


def test_on_the_trained_bilstm_the_backward_reader_leans_on_the_top_rows(trained_ckpt, sample):
    """20 real test digits: each reader's gradient sits mostly on the rows it read last."""
    predictor = Predictor.from_checkpoint(trained_ckpt)
    top = {"forward": [], "backward": []}
    for image in to_input(sample.test_x[:20]):
        rows = predictor.direction_saliency(image.numpy()).rows()
        for name, values in rows.items():
            top[name].append(values[:14].sum() / values.sum())
    forward, backward = np.array(top["forward"]), np.array(top["backward"])
    assert (backward > forward).all(), (forward, backward)  # on the top half, backward outweighs forward
    assert backward.mean() > 0.5 > forward.mean()


def test_the_split_runs_backward_in_eval_mode_on_a_cudnn_like_lstm(trained_ckpt, sample):
    """cuDNN refuses backward through an eval-mode LSTM (the blog's bug); the split turns cuDNN off for its call."""
    predictor = Predictor.from_checkpoint(trained_ckpt)
    x = to_input(sample.test_x[3])
    plain = predictor.direction_saliency(x.numpy())
    model = predictor.model
    model.lstm = CudnnLikeLSTM(model.lstm)
    with mode(model, False), pytest.raises(RuntimeError, match=CUDNN_MESSAGE):
        model(x[None].requires_grad_(True))[0, 0].backward()  # the harness refuses, as cuDNN does
    before = model.training
    split = predictor.direction_saliency(x.numpy())
    for name in plain.parts:
        np.testing.assert_allclose(split.parts[name], plain.parts[name], atol=1e-6)
    assert torch.backends.cudnn.enabled and model.training == before  # both given back


def panel(checkpoint: str, digit: list) -> None:
    import numpy as np

    from brnn_core.inference.predictor import Predictor
    from ui.explaining import Explanations
    from ui.prediction import show_directions

    predictor = Predictor.from_checkpoint(checkpoint)
    x = np.asarray(digit, dtype=np.float32)
    explain = Explanations(checkpoint, x)  # worked out in the background, as on the Predict page
    show_directions(predictor, x, int(np.argmax(predictor.predict(x))), explain)
    explain.wait()


@pytest.mark.parametrize("net", ["two-way", "one-way"])
def test_the_predict_pages_chart_and_caption(net, trained_ckpt, gru_one_way, sample):
    checkpoint = trained_ckpt if net == "two-way" else gru_one_way.best_ckpt
    at = build_app(function=panel, args=(str(checkpoint), (sample.test_x[0].float() / 255).tolist())).run()
    no_exception(at)
    rerun_until(at, lambda a: len(a.get("plotly_chart")) == 1, "the strip, worked out in the background")
    [chart] = at.get("plotly_chart")
    spec = json.loads(chart.proto.spec)
    assert spec["layout"]["title"]["text"].startswith("What each direction drew on: ")
    assert [trace["name"] for trace in spec["data"]] == (["forward reader", "backward reader"] if net == "two-way"
                                                         else ["forward reader"])
    assert "logits per unit of ink" in spec["layout"]["xaxis"]["title"]["text"]
    caption = " ".join(c.value for c in at.caption)
    assert "arXiv:1910.12370" in caption and "favour the rows a reader read last" in caption
    assert ("the two bars are the parts of one gradient" if net == "two-way" else "one reader, top down") in caption
