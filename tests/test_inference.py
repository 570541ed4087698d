"""Canvas drawing -> MNIST-style 28x28 input -> class probabilities.

Odd drawings too (blank, a single dot, strokes touching the edges, inverted colours, odd array shapes
and values): a sensible answer (None for nothing drawn), never an exception.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from brnn_core.checkpoint import save_checkpoint
from brnn_core.data.canvas import (
    DESLANT,
    MNIST_SLANT,
    deslant_for,
    load_image,
    prepare,
    preprocess,
    slant,
    straighten,
    to_grey,
)
from brnn_core.inference.predictor import Predictor
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.training.engine import evaluate

SIZE = 280  # the dashboard's canvas
STROKE = 20  # design.md: 18-22 px on a 280 px canvas matches MNIST's stroke thickness
SEVEN = [(70, 60), (210, 60), (120, 230)]


def drawing(lines, *, ink=(255, 255, 255, 255), paper=(0, 0, 0, 0), width=STROKE, mode="RGBA") -> np.ndarray:
    """What the canvas returns: (H, W, 4) uint8; default white ink on a transparent background."""
    img = Image.new(mode, (SIZE, SIZE), paper)
    draw = ImageDraw.Draw(img)
    for points in lines:
        draw.line(points, fill=ink, width=width, joint="curve")
    return np.asarray(img)


def centre_of_mass(img: torch.Tensor) -> tuple[float, float]:
    ys, xs = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    return float((ys * img).sum() / img.sum()), float((xs * img).sum() / img.sum())


def ink_box(img: torch.Tensor, threshold: float = 0.05) -> tuple[int, int]:
    rows = torch.nonzero((img > threshold).any(dim=1)).flatten()
    cols = torch.nonzero((img > threshold).any(dim=0)).flatten()
    return int(rows[-1] - rows[0] + 1), int(cols[-1] - cols[0] + 1)


def assert_mnist_like(img: torch.Tensor) -> None:
    assert img.shape == (28, 28) and img.dtype == torch.float32
    assert img.min() >= 0.0 and img.max() <= 1.0 and img.max() > 0.5
    cy, cx = centre_of_mass(img)
    assert abs(cy - 14) <= 1.0 and abs(cx - 14) <= 1.0, (cy, cx)  # whole-pixel shift: within half a pixel + AA


@pytest.mark.parametrize("canvas", [
    np.zeros((SIZE, SIZE, 4), np.uint8),  # nothing drawn
    np.dstack([np.full((SIZE, SIZE, 3), 255, np.uint8), np.zeros((SIZE, SIZE, 1), np.uint8)]),  # white, transparent
    np.full((SIZE, SIZE, 4), 255, np.uint8),  # an opaque blank white page
    np.full((SIZE, SIZE), 8, np.uint8),  # faint grey noise floor, under 5%
    np.zeros((0, 0, 4), np.uint8),  # a canvas not rendered yet
], ids=["transparent", "white-transparent", "white-page", "faint", "empty"])


def test_blank_canvas_gives_none(canvas):
    assert preprocess(canvas) is None


def test_drawn_stroke_is_normalised_like_mnist():
    img = preprocess(drawing([SEVEN]))
    assert_mnist_like(img)
    assert 18 <= max(ink_box(img)) <= 20  # longest side scaled to the 20x20 box
    assert img.sum() > 20  # a real stroke, not a few faint pixels


def test_inverted_colours_give_the_same_image():
    normal = preprocess(drawing([SEVEN]))
    paper = preprocess(drawing([SEVEN], ink=(0, 0, 0, 255), paper=(255, 255, 255, 255)))  # black on white
    rgb = preprocess(drawing([SEVEN], ink=(255, 255, 255), paper=(0, 0, 0), mode="RGB"))
    grey = preprocess(drawing([SEVEN], ink=255, paper=0, mode="L"))
    for other in (paper, rgb, grey):
        assert torch.allclose(normal, other, atol=1e-6)


def test_aspect_ratio_is_kept():
    img = preprocess(drawing([[(140, 20), (140, 260)]]))  # a tall "1"
    height, width = ink_box(img)
    assert height >= 18 and width <= 6
    assert_mnist_like(img)


def test_single_dots_and_edge_strokes_do_not_raise():
    dot = np.zeros((SIZE, SIZE, 4), np.uint8)
    dot[140, 140] = 255
    assert preprocess(dot) is None  # one pixel is too little ink to classify
    blob = preprocess(drawing([[(140, 140), (141, 140)]], width=30))
    assert_mnist_like(blob)
    for lines in ([[(0, 0), (279, 279)]], [[(0, 5), (279, 5)]], [[(0, 0), (0, 279)], [(0, 279), (279, 279)]]):
        assert_mnist_like(preprocess(drawing(lines)))


def test_a_frame_along_every_edge_is_not_mistaken_for_paper():
    frame = drawing([[(0, 0), (279, 0), (279, 279), (0, 279), (0, 0)]])  # white stroke around a black canvas
    img = preprocess(frame)
    assert img is not None and img[14, 14] < 0.1 and img.max() > 0.9  # a hollow frame, not a filled square


def test_odd_shapes_are_refused_with_a_message():
    with pytest.raises(ValueError, match=r"expected an \(H, W\), \(H, W, 3\) or \(H, W, 4\) image"):
        to_grey(np.zeros((10, 10, 2)))
    with pytest.raises(ValueError, match="got shape"):
        to_grey(np.zeros((2, 10, 10, 4)))


# ------------------------------------------------------------------ straightening a slanted digit
def leaning_one(lean: float) -> np.ndarray:
    """A canvas "1" whose top is `lean` x per y to the right of its foot (lean 0.4: about 22 degrees)."""
    return drawing([[(140 + 0.5 * lean * 200, 40), (140 - 0.5 * lean * 200, 240)]])


def test_straighten_moves_the_slant_most_of_the_way_to_mnists_and_centres_the_ink():
    raw = preprocess(leaning_one(0.4)).numpy()
    before = slant(raw)[0]
    assert before < MNIST_SLANT - 0.2  # leans right, far more than MNIST's writers on average
    for strength in (0.5, DESLANT, 1.0):
        out = straighten(raw, strength)
        after, cy, cx = slant(out)
        assert abs((after - MNIST_SLANT) - (1 - strength) * (before - MNIST_SLANT)) < 0.03, (strength, after)
        assert abs(cy - 14) < 0.05 and abs(cx - 14) < 0.05  # centre of mass exactly in the middle
        assert abs(out.sum() - raw.sum()) < 0.02 * raw.sum()  # the same ink, sheared, none lost at the edges
        assert out.dtype == np.float32 and out.min() >= 0 and out.max() <= 1


def test_straighten_is_a_bilinear_shear_about_the_centre_of_mass():
    """The same resampling as scipy's affine_transform (order 1, zeros outside), written out so the canvas
    path needs no scipy."""
    from scipy.ndimage import affine_transform

    raw = preprocess(drawing([SEVEN])).numpy()
    s, cy, cx = slant(raw)
    a = DESLANT * (s - MNIST_SLANT)
    matrix = np.array([[1.0, 0.0], [a, 1.0]])  # output (row, col) -> input (row, col + a * row) + offset
    expected = affine_transform(raw.astype(np.float64), matrix, offset=np.array([cy, cx]) - matrix @ [14.0, 14.0],
                                order=1, mode="constant", cval=0.0)
    np.testing.assert_allclose(straighten(raw, DESLANT), expected, atol=1e-5)


def test_flat_strokes_and_blank_images_are_only_centred():
    flat = preprocess(drawing([[(40, 140), (240, 150)]])).numpy()  # a dash: no height to measure a slant on
    out = straighten(flat)
    assert abs(out.sum() - flat.sum()) < 0.02 * flat.sum() and np.abs(out - flat).max() < 0.6  # not sheared away
    blank = np.zeros((28, 28), np.float32)
    assert straighten(blank) is blank


def test_only_drawn_digits_are_straightened():
    assert deslant_for([str(d) for d in range(10)]) == DESLANT
    assert deslant_for(["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                        "Bag", "Ankle boot"]) == 0.0
    canvas = leaning_one(0.4)
    assert torch.equal(prepare(canvas, deslant=DESLANT), preprocess(canvas, deslant=DESLANT))
    assert abs(slant(prepare(canvas, deslant=DESLANT).numpy())[0] - MNIST_SLANT) < 0.15
    digit = np.zeros((28, 28), np.uint8)
    digit[4:24, 10:13] = 255
    assert torch.equal(prepare(digit, deslant=DESLANT), prepare(digit))  # a 28x28 array is MNIST's own


def test_prepare_passes_mnist_style_arrays_through(sample):
    digit = sample.test_x[0].numpy()
    as_uint8 = prepare(digit)
    assert torch.equal(as_uint8, sample.test_x[0].float() / 255)  # exactly what training feeds the model
    assert torch.allclose(prepare(digit.astype(np.float32) / 255), as_uint8)
    assert torch.allclose(prepare(torch.from_numpy(digit)), as_uint8)


@pytest.fixture(scope="module")
def predictor(trained_ckpt) -> Predictor:
    return Predictor.from_checkpoint(trained_ckpt)


def test_predict_returns_probabilities_for_every_input_kind(predictor, sample):
    digit = sample.test_x[3].numpy()
    inputs = {"canvas": drawing([SEVEN]), "uint8": digit, "float": digit.astype(np.float32) / 255.0,
              "float64": digit / 255.0}
    results = {}
    for name, image in inputs.items():
        probs = predictor.predict(image)
        assert probs.shape == (10,) and (probs >= 0).all(), name
        assert probs.sum() == pytest.approx(1.0, abs=1e-5), name
        results[name] = probs
    assert np.allclose(results["uint8"], results["float"], atol=1e-6)
    assert np.allclose(results["uint8"], results["float64"], atol=1e-6)
    assert predictor.predict(np.zeros((SIZE, SIZE, 4), np.uint8)) is None
    assert predictor.classes == [str(d) for d in range(10)]
    # A digit model reads a canvas straightened: the same as the straightened 28x28 passed in directly.
    assert predictor.deslant == DESLANT
    straight = preprocess(inputs["canvas"], deslant=DESLANT)
    assert torch.equal(predictor.model_input(inputs["canvas"]), straight)  # what the Predict page shows and passes
    assert np.allclose(results["canvas"], predictor.predict(straight.numpy()), atol=1e-6)


def test_predict_runs_in_eval_mode(tmp_path, sample):
    torch.manual_seed(0)
    # dropout shows a training-mode call
    model = RecurrentClassifier(ModelConfig(hidden_size=16, num_layers=2, dropout=0.5))
    save_checkpoint(tmp_path / "dropout.pt", model, classes=[str(d) for d in range(10)])
    predictor = Predictor.from_checkpoint((tmp_path / "dropout.pt").read_bytes())
    digit = sample.test_x[0].numpy()
    assert np.array_equal(predictor.predict(digit), predictor.predict(digit))


def test_predictions_on_real_test_digits_match_evaluate(predictor, sample):
    n = 200
    probs = np.stack([predictor.predict(x.numpy()) for x in sample.test_x[:n]])
    accuracy = float((probs.argmax(axis=1) == sample.test_y[:n].numpy()).mean())
    assert accuracy >= 0.6  # the shared model (conftest's `finished`, one epoch of hidden 16) reads most; chance: 0.1
    batch = evaluate(predictor.model, sample.test_x[:n], sample.test_y[:n])
    calibrated = (batch.probabilities.log() / predictor.temperature).softmax(dim=1)  # the checkpoint's temperature
    assert np.allclose(probs, calibrated.numpy(), atol=1e-5)  # one preprocessing for both paths


def test_digits_drawn_on_the_canvas_are_recognised(predictor, sample):
    """Real test digits blown up to a 280x280 canvas (white ink, alpha = intensity) go back through
    crop -> 20x20 -> centre of mass, and are still recognised about as well as the 28x28 originals."""
    n = 100
    hits = agree = 0
    for x, y in zip(sample.test_x[:n], sample.test_y[:n], strict=True):
        big = np.asarray(Image.fromarray(x.numpy()).resize((SIZE, SIZE), Image.Resampling.BILINEAR))
        canvas = np.dstack([np.full((SIZE, SIZE, 3), 255, np.uint8), big])
        drawn = predictor.predict(canvas).argmax()
        hits += int(drawn == int(y))
        agree += int(drawn == predictor.predict(x.numpy()).argmax())
    assert hits / n >= 0.7 and agree / n >= 0.8, (hits, agree)


def test_load_image(tmp_path):
    path = tmp_path / "digit.png"
    Image.fromarray(drawing([SEVEN])).save(path)
    assert np.array_equal(load_image(path), drawing([SEVEN]))
    Image.fromarray(drawing([SEVEN], ink=0, paper=255, mode="L")).save(tmp_path / "grey.png")
    assert load_image(tmp_path / "grey.png").shape == (SIZE, SIZE, 4)
    with pytest.raises(ValueError, match="no such image file"):
        load_image(tmp_path / "missing.png")
    (tmp_path / "notes.png").write_text("not a picture")
    with pytest.raises(ValueError, match="not a readable image"):
        load_image(tmp_path / "notes.png")


# ------------------------------------------------------------------ odd drawings
YY, XX = np.mgrid[:SIZE, :SIZE]


def mask_canvas(mask: np.ndarray, *, opaque: bool = True) -> np.ndarray:
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


BLANKS = {
    "transparent": np.zeros((SIZE, SIZE, 4), np.uint8),
    "opaque-black": mask_canvas(np.zeros((SIZE, SIZE), bool)),
    "opaque-white": np.full((SIZE, SIZE, 4), 255, np.uint8),
    "single-pixel": mask_canvas((YY == 140) & (XX == 140)),
    "faint-smudge": (mask_canvas(np.ones((SIZE, SIZE), bool)) * 0.02).astype(np.uint8),
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
    "dot-stroke-20": mask_canvas(np.hypot(YY - 140, XX - 140) < 10),
    "dot-in-a-corner": mask_canvas(np.hypot(YY - 5, XX - 5) < 10),
    "line-top-to-bottom": mask_canvas(np.abs(XX - 140) < 10),
    "line-along-left-edge": mask_canvas(XX < 20),
    "line-along-bottom-edge": mask_canvas(YY >= SIZE - 20),
    "diagonal-corner-to-corner": mask_canvas(np.abs(YY - XX) < 10),
    "frame-along-every-edge": mask_canvas(frame()),
    "frame-transparent-background": mask_canvas(frame(), opaque=False),
    "ring": mask_canvas(ring()),
    "whole-canvas-scribbled-half": mask_canvas(YY < 160),
}


@pytest.mark.parametrize("name", list(DRAWINGS))
def test_drawings_give_a_centred_mnist_image_and_probabilities(predictor, name):
    x = preprocess(DRAWINGS[name])
    assert x is not None and x.shape == (28, 28) and x.dtype == torch.float32
    arr = x.numpy()
    assert np.isfinite(arr).all() and arr.min() >= 0.0 and arr.max() <= 1.0 and arr.max() > 0.5
    cy, cx = centre_of_mass(x)
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
def test_inverted_colours_of_a_ring_give_the_same_image(variant):
    """Black ink on white paper (a photo, an image file) is read as the same digit as white on black."""
    normal = preprocess(mask_canvas(ring())).numpy()
    ink = ring()
    if variant == "rgba-opaque":
        img = mask_canvas(ink)
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
    assert preprocess(mask_canvas(ring()).astype(bool)) is not None
    mnist_like = np.zeros((28, 28), np.uint8)
    mnist_like[4:24, 12:16] = 255
    for arr in (mnist_like, mnist_like.astype(np.float32) / 255, torch.from_numpy(mnist_like),
                np.full((28, 28), np.nan), np.full((28, 28), 1e9), np.full((28, 28), -5.0)):
        x = prepare(arr)
        assert x.shape == (28, 28) and torch.isfinite(x).all() and x.min() >= 0 and x.max() <= 1
        probs = predictor.predict(arr)
        assert np.isfinite(probs).all() and abs(probs.sum() - 1) < 1e-4
