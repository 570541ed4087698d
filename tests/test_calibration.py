"""Honest confidence: temperature scaling fitted at run end, and the "does not look like a digit" check.

The shared small model (conftest.finished) was trained by the worker, whose test report calibrated its
best.pt; the checks here read that, and build real inputs: shapes drawn as canvas strokes and real MNIST
test digits redrawn as strokes (fixed seeds).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import build_app, copy_run

from brnn_core.checkpoint import load_checkpoint, store_calibration
from brnn_core.data.strokes import render
from brnn_core.inference import calibration as cal
from brnn_core.inference.non_digits import drawing_set
from brnn_core.inference.predictor import Predictor
from brnn_core.training.engine import evaluate
from brnn_core.training.reports import calibrate_checkpoint, compute_report, read_report
from ui.prediction import probability_line, reading_caption

DIGITS = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist-test-8k.npz"


@pytest.fixture(scope="module")
def predictor(trained_ckpt) -> Predictor:
    return Predictor.from_checkpoint(trained_ckpt)


@pytest.fixture(scope="module")
def fit(finished):
    """The shared run's splits and its best model's validation logits."""
    data = cal.fit_data(finished.config(), Path(finished.config()["data_dir"]))
    model = load_checkpoint(finished.best_ckpt).build_model("cpu")
    _, logits = cal.features_and_logits(model, data.val_x)
    return data, model, logits


def test_a_run_without_pen_stroke_copies_draws_its_reference_digits_once(gru_one_way, tmp_path, monkeypatch):
    """Calibration gives a run trained on no pen-stroke copies STROKE_REFERENCE of its validation digits drawn: once,
    then from the drawing cache, as the training copies are (each run of a dataset and seed ends the same way)."""
    from brnn_core.data import as_drawn

    config = gru_one_way.config()
    data_dir = Path(config["data_dir"])
    assert config["train"]["drawn_share"] == 0.0
    monkeypatch.setenv("BRNN_CACHE_DIR", str(tmp_path / "cache"))
    first = cal.fit_data(config, data_dir)
    assert len(first.stroke_val_x) == cal.STROKE_REFERENCE and len(list((tmp_path / "cache").glob("*.npy"))) == 1

    def no_drawing(*a, **k):
        raise AssertionError("drew the reference digits again although the cache holds them")

    monkeypatch.setattr(as_drawn, "draw", no_drawing)
    assert torch.equal(cal.fit_data(config, data_dir).stroke_val_x, first.stroke_val_x)


def uncalibrated_copy(src: Path, dst: Path) -> Path:
    """The checkpoint as it was before calibration (as an uploaded or older one is)."""
    obj = torch.load(src, weights_only=True)
    obj.pop("calibration", None)
    torch.save(obj, dst)
    return dst


# ------------------------------------------------------------------ temperature
def test_the_fitted_temperature_lowers_validation_nll(fit):
    data, _, logits = fit
    t = cal.fit_temperature(logits, data.val_y)
    assert cal.nll(logits, data.val_y, t) < cal.nll(logits, data.val_y, 1.0)
    # it is the minimum: a step either way along log T costs NLL
    for step in (0.9, 1.1):
        assert cal.nll(logits, data.val_y, t) <= cal.nll(logits, data.val_y, t * step)


def test_an_overconfident_model_is_cooled_and_its_ece_falls(fit):
    """The same real logits made 4x sharper (an overconfident model): T comes out near 4x, ECE drops."""
    data, _, logits = fit
    sharp = 4 * logits
    t = cal.fit_temperature(sharp, data.val_y)
    assert 2.0 < t / cal.fit_temperature(logits, data.val_y) < 8.0
    before = cal.expected_calibration_error(sharp.softmax(1), data.val_y)
    after = cal.expected_calibration_error((sharp / t).softmax(1), data.val_y)
    assert after < 0.5 * before


def test_ece_of_a_perfectly_calibrated_toy_is_zero_and_of_a_liar_is_its_gap():
    labels = torch.tensor([0, 0, 1, 1])
    honest = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    assert cal.expected_calibration_error(honest, labels) == 0.0
    liar = torch.tensor([[0.9, 0.1]] * 4)  # 90 % sure of class 0, right half the time
    assert cal.expected_calibration_error(liar, labels) == pytest.approx(0.4)


def test_the_report_says_ece_before_and_after_and_the_checkpoint_carries_t(finished):
    report = read_report(finished)["calibration"]
    assert report["calibrated"] and report["ece_bins"] == 15
    for split in ("validation", "test"):
        assert 0 <= report[split]["ece_after"] <= 1 and 0 <= report[split]["ece_before"] <= 1
    assert report["validation"]["nll_after"] <= report["validation"]["nll_before"]
    stored = load_checkpoint(finished.best_ckpt).calibration
    assert stored["temperature"] == pytest.approx(report["temperature"])
    assert stored["distance"]["threshold"] == pytest.approx(report["distance"]["threshold"])


def test_calibrated_probabilities_sum_to_one_and_keep_the_argmax(predictor, trained_ckpt, tmp_path, sample):
    assert predictor.calibrated and predictor.temperature != 1.0
    raw = Predictor.from_checkpoint(uncalibrated_copy(trained_ckpt, tmp_path / "raw.pt"))
    for x in sample.test_x[:20]:
        p, q = predictor.predict(x.numpy()), raw.predict(x.numpy())
        assert p.sum() == pytest.approx(1.0, abs=1e-5)
        assert p.argmax() == q.argmax()
        assert not np.allclose(p, q, atol=1e-4)  # the temperature really changed them
        np.testing.assert_allclose(predictor.assess(x.numpy()).probs, p, atol=1e-6)
    np.testing.assert_allclose(predictor.read_rows(sample.test_x[0].numpy())[-1],
                               predictor.predict(sample.test_x[0].numpy()), atol=1e-6)


def test_a_checkpoint_without_calibration_predicts_as_before_and_says_uncalibrated(trained_ckpt, tmp_path, sample):
    raw = Predictor.from_checkpoint(uncalibrated_copy(trained_ckpt, tmp_path / "raw.pt"))
    assert not raw.calibrated and raw.temperature == 1.0
    x = sample.test_x[0]
    with torch.no_grad():
        softmax = raw.model(x.float().div(255).unsqueeze(0)).softmax(1)[0].numpy()
    np.testing.assert_allclose(raw.predict(x.numpy()), softmax, atol=1e-6)
    assessment = raw.assess(x.numpy())
    assert not assessment.calibrated and assessment.familiar is None and assessment.score is None
    assert probability_line(assessment).endswith("(uncalibrated)")


def test_compute_report_calibrates_an_old_run(finished, tmp_path):
    run = copy_run(finished, tmp_path / "runs")
    uncalibrated_copy(run.best_ckpt, run.best_ckpt)
    (run.path / "report.json").unlink()
    assert not Predictor.from_checkpoint(run.best_ckpt).calibrated
    report = compute_report(run, Path(run.config()["data_dir"]))
    assert report["calibration"]["calibrated"] and read_report(run)["calibration"]["temperature"] > 0
    assert Predictor.from_checkpoint(run.best_ckpt).calibrated


def test_a_run_whose_data_is_gone_is_reported_uncalibrated(finished, tmp_path):
    run = copy_run(finished, tmp_path / "runs")
    config = run.config()
    config["dataset"] = config["train"]["dataset"] = "mnist"  # not in the (empty) data folder given below
    run.config_path.write_text(json.dumps(config))
    uncalibrated_copy(run.best_ckpt, run.best_ckpt)
    model = load_checkpoint(run.best_ckpt).build_model()
    x, y = torch.zeros(4, 28, 28, dtype=torch.uint8), torch.zeros(4, dtype=torch.long)
    entry = calibrate_checkpoint(run, run.best_ckpt, evaluate(model, x, y), y, data_dir=tmp_path / "empty")
    assert entry["calibrated"] is False and "mnist" in entry["reason"]
    assert not Predictor.from_checkpoint(run.best_ckpt).calibrated  # left as it was: T = 1


def test_store_calibration_keeps_the_rest_of_the_checkpoint(trained_ckpt, tmp_path):
    path = uncalibrated_copy(trained_ckpt, tmp_path / "c.pt")
    before = load_checkpoint(path)
    store_calibration(path, {"temperature": 2.0})
    after = load_checkpoint(path)
    assert after.calibration == {"temperature": 2.0} and after.epoch == before.epoch
    assert all(torch.equal(after.model_state[k], v) for k, v in before.model_state.items())


# ------------------------------------------------------------------ does it look like a digit?
def test_features_are_what_the_classifier_reads(fit):
    data, model, logits = fit
    features, again = cal.features_and_logits(model, data.val_x[:8])
    hidden = model.lstm.hidden_size
    assert features.shape == (8, 6 * hidden)
    with torch.no_grad():
        np.testing.assert_allclose(model.fc(features[:, :2 * hidden].clone()), again, atol=1e-5)
    np.testing.assert_allclose(again, logits[:8], atol=1e-5)


def test_a_dash_and_a_zigzag_are_flagged(predictor):
    for shape, least in (("dash", 4), ("zigzag", 3)):
        canvases, _ = drawing_set(seed=7, per_shape=6, shapes=[shape])
        flagged = [not predictor.assess(c).familiar for c in canvases]
        assert sum(flagged) >= least, (shape, flagged)


def test_real_drawn_digits_are_not_flagged(predictor, sample):
    if DIGITS.is_file():  # real MNIST test digits from writers the sample lacks (measured on, never trained on)
        with np.load(DIGITS) as z:
            digits = z["images"][:30]
    else:  # a checkout without the measurement data beside it: the sample's own test split
        digits = sample.test_x[:30].numpy()
    rng = np.random.default_rng(0)
    assessments = [predictor.assess(render(d, rng)) for d in digits]
    assert all(a.calibrated and a.familiar is not None for a in assessments)
    assert sum(not a.familiar for a in assessments) <= 3  # the threshold lets about 5 % of drawn digits through


def test_a_blank_canvas_has_no_assessment(predictor):
    assert predictor.assess(np.zeros((280, 280, 4), np.uint8)) is None


# ------------------------------------------------------------------ what the page says
def test_reading_caption_in_plain_words():
    cpu, gpu = reading_caption(False, bidirectional=True), reading_caption(True, bidirectional=True)
    assert "cuDNN" not in cpu and "cuDNN" in gpu and gpu.startswith(cpu)
    assert "bottom up" not in cpu and "top down" not in cpu and "from the top and from the bottom at once" in cpu
    one_way = reading_caption(False, bidirectional=False)
    assert "from the top down" in one_way and "bottom" not in one_way


def _verdict_app(path: str, shape: str) -> None:
    import streamlit as st

    from brnn_core.inference.non_digits import drawing_set
    from brnn_core.inference.predictor import Predictor
    from ui.prediction import show_verdict

    predictor = Predictor.from_checkpoint(path)
    canvas = drawing_set(7, 1, [shape])[0][0]
    show_verdict(st.container(), predictor, predictor.assess(canvas), predictor.classes)


def test_show_verdict_says_a_dash_is_no_digit(trained_ckpt):
    at = build_app(function=_verdict_app, args=(str(trained_ckpt), "dash")).run()
    assert not at.exception
    assert at.metric[0].label == "Prediction"
    assert "probability" in at.caption[0].value and "uncalibrated" not in at.caption[0].value
    assert any("does not look like a digit" in w.value for w in at.warning)


def test_show_verdict_of_an_uncalibrated_checkpoint_says_so(trained_ckpt, tmp_path):
    path = uncalibrated_copy(trained_ckpt, tmp_path / "raw.pt")
    at = build_app(function=_verdict_app, args=(str(path), "dash")).run()
    assert not at.exception
    assert at.caption[0].value.endswith("(uncalibrated)")
    assert not at.warning  # no distance fitted: no claim either way
