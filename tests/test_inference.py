"""Canvas drawing -> MNIST-style 28x28 input -> class probabilities."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from brnn_core.checkpoint import save_checkpoint
from brnn_core.engine import evaluate
from brnn_core.inference import Predictor, load_image, prepare, preprocess, to_grey
from brnn_core.model import BiLSTM, ModelConfig

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


def test_predict_runs_in_eval_mode(tmp_path, sample):
    torch.manual_seed(0)
    model = BiLSTM(ModelConfig(hidden_size=16, num_layers=2, dropout=0.5))  # dropout shows a training-mode call
    save_checkpoint(tmp_path / "dropout.pt", model, classes=[str(d) for d in range(10)])
    predictor = Predictor.from_checkpoint((tmp_path / "dropout.pt").read_bytes())
    digit = sample.test_x[0].numpy()
    assert np.array_equal(predictor.predict(digit), predictor.predict(digit))


def test_predictions_on_real_test_digits_match_evaluate(predictor, sample):
    n = 200
    probs = np.stack([predictor.predict(x.numpy()) for x in sample.test_x[:n]])
    accuracy = float((probs.argmax(axis=1) == sample.test_y[:n].numpy()).mean())
    assert accuracy >= 0.75  # the shared 2-epoch hidden-32 model scores ~87% on all 500 test digits
    batch = evaluate(predictor.model, sample.test_x[:n], sample.test_y[:n])
    assert np.allclose(probs, batch.probabilities.numpy(), atol=1e-5)  # one preprocessing for both paths


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
