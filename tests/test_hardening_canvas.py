"""Hardening: odd drawings. Blank, a single dot, strokes touching the edges, inverted colours,
odd array shapes and values: a sensible answer (None for nothing drawn), never an exception.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from brnn_core.checkpoint import load_checkpoint, save_checkpoint
from brnn_core.inference import Predictor, prepare, preprocess
from brnn_core.model import BiLSTM, ModelConfig

SIZE = 280
YY, XX = np.mgrid[:SIZE, :SIZE]


def canvas(mask: np.ndarray, *, opaque: bool = True) -> np.ndarray:
    """What st_canvas returns: RGBA uint8, white strokes; background black (opaque) or transparent."""
    img = np.zeros((SIZE, SIZE, 4), np.uint8)
    if opaque:
        img[..., 3] = 255
    img[mask] = (255, 255, 255, 255)
    return img


def ring() -> np.ndarray:
    return np.abs(np.hypot(YY - 140, XX - 140) - 90) < 10


def frame() -> np.ndarray:
    m = np.zeros((SIZE, SIZE), bool)
    m[:20], m[-20:], m[:, :20], m[:, -20:] = True, True, True, True
    return m


@pytest.fixture(scope="module")
def predictor(tmp_path_factory) -> Predictor:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("canvas") / "m.pt"
    save_checkpoint(path, BiLSTM(ModelConfig(hidden_size=8, num_layers=1)), classes=[str(i) for i in range(10)])
    return Predictor(load_checkpoint(path))


def _center_of_mass(x: np.ndarray) -> tuple[float, float]:
    ys, xs = np.indices(x.shape)
    return float((ys * x).sum() / x.sum()), float((xs * x).sum() / x.sum())


BLANKS = {
    "transparent": np.zeros((SIZE, SIZE, 4), np.uint8),
    "opaque-black": canvas(np.zeros((SIZE, SIZE), bool)),
    "opaque-white": np.full((SIZE, SIZE, 4), 255, np.uint8),
    "single-pixel": canvas((YY == 140) & (XX == 140)),
    "faint-smudge": (canvas(np.ones((SIZE, SIZE), bool)) * 0.02).astype(np.uint8),
    "zero-size": np.zeros((0, 0, 4), np.uint8),
    "zero-height": np.zeros((0, SIZE, 4), np.uint8),
    "one-pixel-canvas": np.zeros((1, 1, 4), np.uint8),
    "all-nan": np.full((SIZE, SIZE, 4), np.nan),
}


@pytest.mark.parametrize("name", list(BLANKS))
def test_nothing_drawn_means_no_prediction(predictor, name):
    assert preprocess(BLANKS[name]) is None
    assert predictor.predict(BLANKS[name]) is None


DRAWINGS = {
    "dot-stroke-20": canvas(np.hypot(YY - 140, XX - 140) < 10),
    "dot-in-a-corner": canvas(np.hypot(YY - 5, XX - 5) < 10),
    "line-top-to-bottom": canvas(np.abs(XX - 140) < 10),
    "line-along-left-edge": canvas(XX < 20),
    "line-along-bottom-edge": canvas(YY >= SIZE - 20),
    "diagonal-corner-to-corner": canvas(np.abs(YY - XX) < 10),
    "frame-along-every-edge": canvas(frame()),
    "frame-transparent-background": canvas(frame(), opaque=False),
    "ring": canvas(ring()),
    "whole-canvas-scribbled-half": canvas(YY < 160),
}


@pytest.mark.parametrize("name", list(DRAWINGS))
def test_drawings_give_a_centred_mnist_image_and_probabilities(predictor, name):
    x = preprocess(DRAWINGS[name])
    assert x is not None and x.shape == (28, 28) and x.dtype == torch.float32
    arr = x.numpy()
    assert np.isfinite(arr).all() and arr.min() >= 0.0 and arr.max() <= 1.0 and arr.max() > 0.5
    cy, cx = _center_of_mass(arr)
    assert abs(cy - 14) <= 1.5 and abs(cx - 14) <= 1.5, (cy, cx)
    assert arr[0, 0] == 0 and arr[-1, -1] == 0 and arr[0, -1] == 0 and arr[-1, 0] == 0  # background stays black
    probs = predictor.predict(DRAWINGS[name])
    assert probs.shape == (10,) and np.isfinite(probs).all() and abs(probs.sum() - 1) < 1e-4


def test_a_frame_along_the_edges_stays_a_frame_not_a_filled_square():
    """A white stroke along every edge makes a white border; that must not flip the colours."""
    for img in (DRAWINGS["frame-along-every-edge"], DRAWINGS["frame-transparent-background"]):
        arr = preprocess(img).numpy()
        assert arr[14, 14] == 0.0, "the inside of the frame became ink (colours inverted)"
        assert arr.mean() < 0.3


@pytest.mark.parametrize("variant", ["rgba-opaque", "rgb", "grey", "grey-float"])
def test_inverted_colours_give_the_same_image(variant):
    """Black ink on white paper (a photo, an image file) is read as the same digit as white on black."""
    normal = preprocess(canvas(ring())).numpy()
    ink = ring()
    if variant == "rgba-opaque":
        img = canvas(ink)
        img[..., :3] = 255 - img[..., :3]
    elif variant == "rgb":
        img = np.repeat(np.where(ink, 0, 255).astype(np.uint8)[..., None], 3, axis=2)
    elif variant == "grey":
        img = np.where(ink, 0, 255).astype(np.uint8)
    else:
        img = np.where(ink, 0.0, 1.0)
    assert np.abs(preprocess(img).numpy() - normal).max() < 1e-6


def test_odd_inputs(predictor):
    with pytest.raises(ValueError, match=r"expected an \(H, W\), \(H, W, 3\) or \(H, W, 4\) image"):
        preprocess(np.zeros((SIZE, SIZE, 2)))
    with pytest.raises(ValueError, match="expected an"):
        preprocess(np.zeros((2, 2, 2, 2)))
    big = np.zeros((2000, 1200, 4), np.uint8)
    big[300:1700, 500:700] = 255
    assert preprocess(big) is not None
    assert preprocess(canvas(ring()).astype(bool)) is not None
    mnist_like = np.zeros((28, 28), np.uint8)
    mnist_like[4:24, 12:16] = 255
    for arr in (mnist_like, mnist_like.astype(np.float32) / 255, torch.from_numpy(mnist_like),
                np.full((28, 28), np.nan), np.full((28, 28), 1e9), np.full((28, 28), -5.0)):
        x = prepare(arr)
        assert x.shape == (28, 28) and torch.isfinite(x).all() and x.min() >= 0 and x.max() <= 1
        probs = predictor.predict(arr)
        assert np.isfinite(probs).all() and abs(probs.sum() - 1) < 1e-4
