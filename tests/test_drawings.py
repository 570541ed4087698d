"""The user's saved drawings (my-drawings): saving, listing, deleting, bad files, and training on them."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from helpers import SAMPLE_TRAIN_IMAGES, SMALL_MODEL, train_run
from PIL import Image
from test_inference import SEVEN, drawing

from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import ConfigError, TrainConfig
from brnn_core.data.canvas import DESLANT, preprocess
from brnn_core.data.datasets import FASHION_CLASSES, MNIST_CLASSES
from brnn_core.data.drawings import (
    MIN_FOR_ACCURACY,
    DrawingError,
    as_tensors,
    delete_drawing,
    drawing_count,
    drawings_dir,
    folder_signature,
    list_drawings,
    save_drawing,
    to_uint8,
)
from brnn_core.data.strokes import render
from brnn_core.inference.scores import DrawingTensors, checkpoint_accuracy
from brnn_core.training.engine import evaluate
from brnn_core.training.reports import read_report

NOW = 1_767_225_600.25  # a fixed time: ids and "created" are predictable


def canvases(digits: torch.Tensor, seed: int = 0) -> list[np.ndarray]:
    """Canvas-like drawings (brush strokes on 280x280 RGBA) of MNIST digits, as in benchmarks/drawn_digits.py."""
    rng = np.random.default_rng(seed)
    return [render(d, rng) for d in digits.numpy()]


def save_many(data_dir, digits: torch.Tensor, labels: torch.Tensor) -> list:
    return [save_drawing(data_dir, c, int(y), MNIST_CLASSES, now=NOW + k)
            for k, (c, y) in enumerate(zip(canvases(digits), labels, strict=True))]


# ------------------------------------------------------------------ saving, listing, deleting
def test_save_list_delete_round_trip(tmp_path):
    canvas = drawing([SEVEN])
    saved = save_drawing(tmp_path, canvas, 7, MNIST_CLASSES, now=NOW)
    assert saved.id.startswith(time.strftime("%Y%m%d-%H%M%S-250000-", time.localtime(NOW)))
    assert saved.folder == drawings_dir(tmp_path) == tmp_path / "my-drawings"
    assert (saved.label, saved.class_name, saved.held_out) == (7, "7", False)
    # The canvas as drawn, and the 28x28 the model saw (a digit: straightened), 8 bit like MNIST.
    np.testing.assert_array_equal(np.asarray(Image.open(saved.canvas_path)), canvas)
    seen = to_uint8(preprocess(canvas, deslant=DESLANT))
    np.testing.assert_array_equal(np.asarray(Image.open(saved.input_path)), seen)
    meta = json.loads(saved.meta_path.read_text())
    assert meta == {"label": 7, "class_name": "7", "classes": MNIST_CLASSES, "created": NOW, "held_out": False,
                    "deslant": DESLANT}

    listing = list_drawings(tmp_path)
    assert [d.id for d in listing.drawings] == [saved.id] and not listing.warnings
    np.testing.assert_array_equal(listing.images[0], seen)

    delete_drawing(tmp_path, saved.id)
    assert list_drawings(tmp_path).drawings == []
    assert list(drawings_dir(tmp_path).iterdir()) == []  # all three files are gone


def test_a_drawing_saved_before_straightening_is_made_again_from_its_canvas(tmp_path):
    """Drawings saved by a version without the slant step (no "deslant" in the .json) must not teach or score
    a model on an input it is no longer shown: the first read remakes input.png from the canvas."""
    canvas = drawing([SEVEN])
    saved = save_drawing(tmp_path, canvas, 7, MNIST_CLASSES, now=NOW)
    old_input = to_uint8(preprocess(canvas))  # what the older canvas path stored
    Image.fromarray(old_input, "L").save(saved.input_path)
    meta = json.loads(saved.meta_path.read_text())
    del meta["deslant"]
    saved.meta_path.write_text(json.dumps(meta))

    straight = to_uint8(preprocess(canvas, deslant=DESLANT))
    assert np.abs(straight.astype(int) - old_input).max() > 50  # the slant step really changes this 7
    listing = list_drawings(tmp_path)
    np.testing.assert_array_equal(listing.images[0], straight)
    np.testing.assert_array_equal(np.asarray(Image.open(saved.input_path)), straight)  # saved, once
    assert json.loads(saved.meta_path.read_text()) == {**meta, "deslant": DESLANT}
    np.testing.assert_array_equal(list_drawings(tmp_path).images[0], straight)


@pytest.mark.parametrize("canvas", [np.zeros((280, 280, 4), np.uint8), np.zeros((0, 0, 4), np.uint8),
                                    np.full((28, 28), 255, np.uint8)], ids=["blank", "not-rendered", "not-rgba"])
def test_a_drawing_without_ink_is_refused(tmp_path, canvas):
    with pytest.raises(DrawingError, match="nothing to save: the canvas has no ink.*Draw the digit first"):
        save_drawing(tmp_path, canvas, 3, MNIST_CLASSES)
    assert not drawings_dir(tmp_path).exists() or not list(drawings_dir(tmp_path).iterdir())


@pytest.mark.parametrize("label", [10, -1, True, "7", 2.0])
def test_a_label_outside_the_classes_is_refused(tmp_path, label):
    with pytest.raises(DrawingError, match=r"is not a class here; use 0 to 9 \(0, 1, 2"):
        save_drawing(tmp_path, drawing([SEVEN]), label, MNIST_CLASSES)


def test_every_class_holds_out_its_third_and_eighth_drawing(tmp_path):
    canvas = drawing([SEVEN])
    held = [save_drawing(tmp_path, canvas, 3, MNIST_CLASSES, now=NOW + k).held_out for k in range(9)]
    others = [save_drawing(tmp_path, canvas, 5, MNIST_CLASSES, now=NOW + 20 + k).held_out for k in range(2)]
    fashion = [save_drawing(tmp_path, canvas, 3, FASHION_CLASSES, now=NOW + 30 + k).held_out for k in range(3)]
    assert held == [False, False, True, False, False, False, False, True, False]
    assert others == [False, False] and fashion == [False, False, True]  # counted per class set and class
    listing = list_drawings(tmp_path, MNIST_CLASSES)
    assert len(listing.drawings) == 11 and sum(d.held_out for d in listing.drawings) == 2
    assert [d.created for d in listing.drawings] == sorted(d.created for d in listing.drawings)


def test_damaged_and_foreign_files_are_skipped_with_a_warning(tmp_path):
    good = save_drawing(tmp_path, drawing([SEVEN]), 7, MNIST_CLASSES, now=NOW)
    broken = [save_drawing(tmp_path, drawing([SEVEN]), 1, MNIST_CLASSES, now=NOW + k) for k in range(1, 5)]
    broken[0].meta_path.write_text("{not json")
    broken[1].input_path.unlink()
    broken[2].input_path.write_bytes(broken[2].input_path.read_bytes()[:30])  # truncated PNG
    broken[3].meta_path.write_text(json.dumps({"label": 12, "classes": MNIST_CLASSES, "created": NOW}))
    (drawings_dir(tmp_path) / "notes.json").write_text("{}")
    (drawings_dir(tmp_path) / "stray.png").write_bytes(b"\x89PNG")
    listing = list_drawings(tmp_path)
    assert [d.id for d in listing.drawings] == [good.id]
    assert len(listing.warnings) == 5, listing.warnings
    text = "\n".join(listing.warnings)
    for b in broken:
        assert f"skipped {b.id}.json" in text
    assert "not valid JSON" in text and "label 12 is not one of its 10 classes" in text
    assert "skipped notes.json: not a drawing's file name" in text
    # The dataset still loads from what is readable.
    train_x, train_y = as_tensors(listing, held_out=False)
    assert train_y.tolist() == [7] and len(as_tensors(listing, held_out=True)[1]) == 0


def test_delete_refuses_what_is_not_a_drawing(tmp_path):
    saved = save_drawing(tmp_path, drawing([SEVEN]), 7, MNIST_CLASSES, now=NOW)
    for bad in ("../../etc/passwd", f"{saved.id}/../x", "", None):
        with pytest.raises(DrawingError, match="is not a drawing id"):
            delete_drawing(tmp_path, bad)
    delete_drawing(tmp_path, saved.id)
    with pytest.raises(DrawingError, match="may have been deleted already"):
        delete_drawing(tmp_path, saved.id)


def test_my_drawings_is_a_dataset_of_tensors(tmp_path, sample):
    digits, labels = sample.train_x[:12], sample.train_y[:12]
    saved = save_many(tmp_path, digits, labels)
    save_drawing(tmp_path, drawing([SEVEN]), 0, FASHION_CLASSES, now=NOW + 99)  # another class set: not in it
    listing = list_drawings(tmp_path, MNIST_CLASSES)
    train_x, train_y = as_tensors(listing, held_out=False)
    test_x, test_y = as_tensors(listing, held_out=True)
    assert train_x.dtype == torch.uint8 and train_x.shape[1:] == (28, 28)
    assert len(train_y) + len(test_y) == 12
    assert test_y.tolist() == [d.label for d in saved if d.held_out]
    assert train_y.tolist() == [d.label for d in saved if not d.held_out]
    first = next(i for i, d in enumerate(saved) if not d.held_out)
    np.testing.assert_array_equal(train_x[0].numpy(), np.asarray(Image.open(saved[first].input_path)))


def test_scores_need_ten_drawings_and_match_evaluate(tmp_path, sample, trained_ckpt):
    sig0 = folder_signature(tmp_path)
    save_many(tmp_path, sample.train_x[:MIN_FOR_ACCURACY - 1], sample.train_y[:MIN_FOR_ACCURACY - 1])
    assert folder_signature(tmp_path) != sig0
    assert checkpoint_accuracy(trained_ckpt, tmp_path) is None  # 9 drawings say too little
    save_drawing(tmp_path, canvases(sample.train_x[20:21])[0], int(sample.train_y[20]), MNIST_CLASSES)
    acc, n, held_only = checkpoint_accuracy(trained_ckpt, tmp_path)
    x, y = as_tensors(list_drawings(tmp_path, MNIST_CLASSES))
    expected = evaluate(load_checkpoint(trained_ckpt).build_model(), x, y).accuracy
    assert n == 10 and acc == pytest.approx(expected) and acc >= 0.5  # the small model reads most of them
    assert not held_only  # it never trained on drawings: every one of them counts
    # many checkpoints in a row (the dashboard's Scorer): the drawings are read once per class list
    tensors = DrawingTensors(tmp_path)
    assert checkpoint_accuracy(trained_ckpt, tmp_path, tensors) == (acc, n, False)
    (drawings_dir(tmp_path) / next(p.name for p in drawings_dir(tmp_path).glob("*.png"))).unlink()
    assert checkpoint_accuracy(trained_ckpt, tmp_path, tensors) == (acc, n, False)  # read before: not again
    assert checkpoint_accuracy(trained_ckpt, tmp_path) is None  # read again: 9 drawings left


# ------------------------------------------------------------------ training on them
def test_config_fields_for_drawings(tmp_path, trained_ckpt):
    cfg = TrainConfig.from_dict({"my_drawings": "0.25", "init_from": str(trained_ckpt)})
    assert cfg.my_drawings == 0.25 and cfg.init_from == str(trained_ckpt)
    assert "held-out" in TrainConfig.help_for("my_drawings") and "fine-tuning" in TrainConfig.help_for("init_from")
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict({"my_drawings": 0.6, "init_from": str(tmp_path / "nope.pt")})
    assert "allowed 0 to 0.5" in err.value.errors["my_drawings"]
    assert "no checkpoint file" in err.value.errors["init_from"]


def test_cli_refuses_a_missing_init_checkpoint(brnn, tmp_path):
    proc = brnn(["train", "--set", "my_drawings=0.2", "--set", "init_from=/no/such.pt"], tmp_path / "runs",
                tmp_path / "data")
    assert proc.returncode == 2, proc.stderr
    assert "init_from: no checkpoint file '/no/such.pt'" in proc.stderr


def test_fine_tune_with_drawings_mixed_in(tmp_path, sample, trained_ckpt):
    """A real run: weights from a checkpoint, drawings mixed in, held-out drawings scored before and after."""
    data_dir = tmp_path / "data"
    pick = torch.cat([torch.nonzero(sample.train_y == c).flatten()[:3] for c in range(5)])  # 3 each of 0-4
    saved = save_many(data_dir, sample.train_x[pick], sample.train_y[pick])
    assert sum(d.held_out for d in saved) == 5  # the third of each class
    run, state = train_run(tmp_path / "runs", data_dir, **SMALL_MODEL, my_drawings=0.2,
                           init_from=str(trained_ckpt))
    assert state == "finished", run.status()
    mix = run.config()["my_drawings"]
    base = SAMPLE_TRAIN_IMAGES
    assert (mix["train"], mix["held_out"], mix["repeats"]) == (10, 5, round(0.2 * base / (0.8 * 10)))
    assert run.config()["sizes"]["train"] == base + 10 * mix["repeats"]

    held_x, held_y = as_tensors(list_drawings(data_dir, MNIST_CLASSES), held_out=True)
    before = evaluate(load_checkpoint(trained_ckpt).build_model(), held_x, held_y).accuracy
    after = evaluate(load_checkpoint(run.best_ckpt).build_model(), held_x, held_y).accuracy
    report = read_report(run)["my_drawings"]
    assert report["before"] == pytest.approx(before) and report["after"] == pytest.approx(after)
    message = run.status()["message"]
    assert message.startswith("finished: test accuracy")
    assert f"held-out drawings: {100 * before:.1f}% -> {100 * after:.1f}% (5)" in message
    start = next(e for e in run.events() if e["kind"] == "start")
    assert f"weights from {trained_ckpt}" in start["message"]


def test_asking_for_drawings_when_there_are_none_fails_clearly(tmp_path):
    run, state = train_run(tmp_path / "runs", tmp_path / "data", **SMALL_MODEL, my_drawings=0.1)
    assert state == "failed"
    message = run.status()["message"]
    assert f"{tmp_path / 'data' / 'my-drawings'} holds no drawings" in message and "set my_drawings=0" in message


def test_init_from_another_architecture_fails_clearly(tmp_path, trained_ckpt):
    run, state = train_run(tmp_path / "runs", tmp_path / "data", hidden_size=8, epochs=1,
                           init_from=str(trained_ckpt))
    assert state == "failed"
    assert ("set cell=lstm bidirectional=true hidden_size=16 num_layers=2 head=bidir input_scale=standard to match it"
            in run.status()["message"])


def test_weights_that_trained_on_the_drawings_are_scored_on_the_held_out_ones(tmp_path, sample, trained_ckpt):
    """A taught checkpoint, or one fine-tuned from it, has seen every drawing but the held-out ones: its score
    counts only those, and says so."""
    import torch

    saved = save_many(tmp_path, sample.train_x[:20], sample.train_y[:20])
    held = sum(d.held_out for d in saved)
    assert 0 < held < len(saved)
    raw = torch.load(trained_ckpt, weights_only=True)
    taught, child = tmp_path / "taught.pt", tmp_path / "child.pt"
    torch.save(raw | {"train_config": raw["train_config"] | {"my_drawings": 0.2}}, taught)
    torch.save(raw | {"train_config": raw["train_config"] | {"my_drawings": 0.0, "init_from": str(taught)}}, child)
    assert checkpoint_accuracy(trained_ckpt, tmp_path) == (pytest.approx(checkpoint_accuracy(
        trained_ckpt, tmp_path).accuracy), 20, False)
    for path in (taught, child):
        score = checkpoint_accuracy(path, tmp_path)
        assert score.count == held and score.held_out_only, (path.name, score)
    taught.unlink()  # a start checkpoint that cannot be read: it may have seen them
    assert checkpoint_accuracy(child, tmp_path).held_out_only


def test_score_memo_keeps_what_a_server_read_for_the_next_one(tmp_path, monkeypatch):
    """One file instead of a thousand: valid only for the same drawings and the same checkpoint file."""
    from brnn_core.inference import scores as scores_module
    from brnn_core.inference.scores import DrawingScore, ScoreMemo

    monkeypatch.setattr(scores_module, "MEMO_EVERY_S", 0.0)
    path, ckpt = tmp_path / ".drawing-scores.json", tmp_path / "run" / "best.pt"
    memo = ScoreMemo(path)
    assert memo.get(ckpt, "sig", (1, 2)) == (False, None)
    memo.put(ckpt, "sig", (1, 2), DrawingScore(0.8, 12, False))
    memo.put(tmp_path / "other.pt", "sig", (3, 4), None)  # too few drawings of its classes: known, no score
    memo.save()
    again = ScoreMemo(path)
    assert again.get(ckpt, "sig", (1, 2)) == (True, (0.8, 12, False))
    assert again.get(tmp_path / "other.pt", "sig", (3, 4)) == (True, None)
    assert again.get(ckpt, "new drawings", (1, 2)) == (False, None)  # the drawings changed
    assert again.get(ckpt, "sig", (5, 2)) == (False, None)  # the checkpoint was rewritten
    path.write_text("{broken")
    assert ScoreMemo(path).get(ckpt, "sig", (1, 2)) == (False, None)  # only a cache: ignored


def test_drawing_count_reads_no_image(tmp_path, sample):
    assert drawing_count(tmp_path) == 0
    save_many(tmp_path, sample.train_x[:3], sample.train_y[:3])
    assert drawing_count(tmp_path) == 3 == len(list_drawings(tmp_path).drawings)
