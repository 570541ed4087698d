"""Training digits drawn as canvas strokes (brnn_core.data.as_drawn): which, how, cached, and where they go."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_run

from brnn_core.config import OLDER_RUN_DEFAULTS, TrainConfig, resolve_drawn_share
from brnn_core.data import as_drawn, canvas
from brnn_core.data.batching import split_train_val
from brnn_core.training.splits import load_splits
from brnn_core.training.worker import train_run_dir


def test_the_redrawn_share_is_fixed_by_the_dataset_size():
    a, b = as_drawn.picked(4500, 0.5), as_drawn.picked(4500, 0.5)
    assert torch.equal(a, b) and 0.45 < len(a) / 4500 < 0.55  # every run of a dataset redraws the same digits
    assert torch.equal(a, torch.sort(a).values) and len(set(a.tolist())) == len(a)
    assert len(as_drawn.picked(4500, 0.0)) == 0 and len(as_drawn.picked(4500, 1.0)) == 4500


def test_drawn_digits_look_like_prepared_canvas_drawings(sample):
    digits = sample.train_x[:20].numpy()
    drawn = as_drawn.draw(digits)
    assert drawn.shape == digits.shape and drawn.dtype == np.uint8
    for original, d in zip(digits, drawn, strict=True):
        assert not np.array_equal(original, d)
        ys, xs = np.nonzero(d > 40)
        assert ys.max() - ys.min() <= 20 and xs.max() - xs.min() <= 20  # fitted in MNIST's 20x20 box
        mass = d.astype(np.float64)
        cy = (mass.sum(1) * np.arange(28)).sum() / mass.sum()
        cx = (mass.sum(0) * np.arange(28)).sum() / mass.sum()
        assert abs(cy - 13.5) < 1.5 and abs(cx - 13.5) < 1.5  # centred by its centre of mass, as MNIST was
        assert d.max() >= 230  # the brush is solid white (resampling may soften its brightest pixel a little)
    assert np.array_equal(drawn, as_drawn.draw(digits))  # the same digits are always drawn the same way
    # One drawing is exactly what the Predict page's preprocessing makes of the canvas drawing.
    from brnn_core.data.strokes import render
    rng = np.random.default_rng(as_drawn.DRAW_SEED)
    first = canvas.preprocess(render(digits[0], rng, supersample=1), deslant=canvas.DESLANT)
    assert np.array_equal(drawn[0], np.round(first.numpy() * 255).astype(np.uint8))


def _ring(filled: bool) -> np.ndarray:
    """A 28x28 '6'-like digit: a stem and a loop drawn with a 2 px pen, the loop open or filled in."""
    yy, xx = np.mgrid[:28, :28]
    r = np.hypot(yy - 17, xx - 13)
    ink = (np.abs(r - 5) < 1.0) | (filled & (r < 5))
    ink |= (np.abs(xx - 8.5) < 1.0) & (yy > 4) & (yy < 17)  # the stem
    return (ink * 255).astype(np.uint8)


def test_a_digit_with_a_filled_in_loop_is_kept_as_written():
    open_six, solid_six = _ring(False), _ring(True)
    assert as_drawn.strokes.unexplained_ink(open_six) < 0.05
    assert as_drawn.strokes.unexplained_ink(solid_six) > as_drawn.MAX_UNEXPLAINED  # its skeleton has no loop
    drawn = as_drawn.draw(np.stack([open_six, solid_six]))
    assert not np.array_equal(drawn[0], open_six) and np.array_equal(drawn[1], solid_six)
    assert as_drawn.strokes.unexplained_ink(np.zeros((28, 28), np.uint8)) == 1.0  # blank: nothing to redraw


def test_drawn_copies_are_drawn_once_and_then_read_from_the_cache(sample, tmp_path, monkeypatch):
    monkeypatch.delenv("BRNN_CACHE_DIR", raising=False)
    train_x = sample.train_x[:60]
    idx, drawn = as_drawn.drawn_copies(train_x, 0.5, tmp_path / "data")
    files = list((tmp_path / "data" / "cache").glob("as-drawn-v*.npy"))
    assert len(files) == 1 and torch.equal(idx, as_drawn.picked(60, 0.5))
    assert torch.equal(drawn, torch.from_numpy(as_drawn.draw(train_x[idx].numpy())))

    def no_drawing(*a, **k):
        raise AssertionError("drew again although the cache holds them")

    monkeypatch.setattr(as_drawn, "draw", no_drawing)
    idx2, again = as_drawn.drawn_copies(train_x, 0.5, tmp_path / "data")
    assert torch.equal(idx2, idx) and torch.equal(again, drawn)

    monkeypatch.undo()
    monkeypatch.delenv("BRNN_CACHE_DIR", raising=False)
    files[0].write_bytes(b"torn")  # a damaged cache file is drawn again and replaced
    messages = []
    _, redrawn = as_drawn.drawn_copies(train_x, 0.5, tmp_path / "data", progress=messages.append)
    assert torch.equal(redrawn, drawn) and np.array_equal(np.load(files[0]), drawn.numpy())
    assert messages and messages[0].startswith(f"drawing {len(idx)} training digits as canvas strokes")


def test_a_cache_that_cannot_be_written_costs_only_drawing_again(sample, tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("BRNN_CACHE_DIR", str(blocked / "cache"))
    idx, drawn = as_drawn.drawn_copies(sample.train_x[:20], 0.5, tmp_path / "data")
    assert len(drawn) == len(idx) > 0


def test_only_the_training_split_of_a_digit_dataset_is_redrawn(sample, tmp_path):
    cfg = TrainConfig(dataset="mnist-sample", device="cpu")
    assert cfg.drawn_share == 0.3  # the default recipe (docs/decisions/011-drawn-share.md)
    splits = load_splits(cfg, tmp_path, torch.device("cpu"), progress=lambda msg: None)
    train_idx, val_idx = split_train_val(len(sample.train_y), cfg.val_fraction, cfg.seed)
    drawn_idx, drawn = as_drawn.drawn_copies(sample.train_x, cfg.drawn_share, tmp_path)
    expected = sample.train_x.clone()
    expected[drawn_idx] = drawn
    assert torch.equal(splits.train_x, expected[train_idx]) and torch.equal(splits.train_y, sample.train_y[train_idx])
    changed = (splits.train_x != sample.train_x[train_idx]).flatten(1).any(1).float().mean().item()
    assert 0.25 < changed < 0.35
    assert torch.equal(splits.val_x, sample.train_x[val_idx])  # validation and test: the dataset's own images
    assert torch.equal(splits.test_x, sample.test_x)

    off = load_splits(cfg.replace(drawn_share=0.0), tmp_path, torch.device("cpu"), progress=lambda msg: None)
    assert torch.equal(off.train_x, sample.train_x[train_idx])


def test_clothes_and_runs_from_before_are_never_redrawn():
    assert resolve_drawn_share(0.5, "mnist") == resolve_drawn_share(0.5, "mnist-sample") == 0.5
    assert resolve_drawn_share(0.5, "fashion-mnist") == resolve_drawn_share(0.5, "kmnist") == 0.0
    assert OLDER_RUN_DEFAULTS["drawn_share"] == 0.0  # a run made before the setting resumes on the data it began with


@pytest.mark.slow
def test_a_run_records_the_share_it_trained_with(tmp_path):
    run = make_run(tmp_path / "runs", hidden_size=8, num_layers=1, epochs=1)
    assert train_run_dir(run, data_dir=tmp_path / "data") == "finished"
    assert run.config()["train"]["drawn_share"] == 0.3 and run.config()["drawn_share"] == 0.3


def test_the_share_is_validated():
    with pytest.raises(ValueError, match="drawn_share"):
        TrainConfig.from_dict({"drawn_share": 1.5})


@pytest.mark.slow
def test_the_cli_says_it_is_drawing_the_first_time_only(brnn, runs_dir, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("BRNN_CACHE_DIR", str(tmp_path / "fresh-cache"))
    args = ["train", "--set", "epochs=1", "--set", "hidden_size=8", "--set", "num_layers=1"]
    first = brnn(args, runs_dir, data_dir)
    assert first.returncode == 0, first.stderr
    assert "drawing 1,404 training digits as canvas strokes, once for this dataset: 0/1,404" in first.stdout
    assert len(list((tmp_path / "fresh-cache").glob("as-drawn-v*.npy"))) == 1
    second = brnn(args, runs_dir, data_dir)
    assert second.returncode == 0 and "drawing" not in second.stdout
