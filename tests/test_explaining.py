"""The Predict page's background explanations (ui.explaining.Explainer) and the stop they rely on
(explain.integrated_gradients' `should_stop`), with real threads and a real checkpoint: an earlier stroke's
explanation is given up once the drawing changed, so the new drawing's is not queued behind it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import wait_for

from brnn_core.inference.explain import Stopped
from brnn_core.inference.predictor import Predictor
from ui.explaining import Explainer, Failed


def test_an_earlier_strokes_explanation_stops_when_the_drawing_changes():
    explainer = Explainer()
    started, saw_stop = threading.Event(), threading.Event()

    def first_stroke(stop) -> str:  # a long computation that looks at `stop` as integrated gradients does
        started.set()
        wait_for(stop, 60, "the first stroke's explanation to be given up")
        saw_stop.set()
        return "first"

    explainer.begin("session")
    assert explainer.want("session", "first", first_stroke) is None  # not ready: worked out in the background
    wait_for(started.is_set, 60, "the first explanation to start")
    explainer.begin("session")  # the next stroke's run: it wants only the new drawing's
    assert explainer.want("session", "second", lambda stop: "second") is None
    wait_for(lambda: explainer.want("session", "second", lambda stop: "second") == "second", 60,
             "the second stroke's explanation")
    assert saw_stop.is_set()
    # what another session still wants is not given up for this one's change
    explainer.begin("other")
    gate = threading.Event()
    assert explainer.want("other", "shared", lambda stop: gate.wait(60) and "shared") is None
    explainer.begin("session")
    explainer.want("session", "shared", lambda stop: "never called")
    explainer.begin("session")  # this session moved on; "other" still wants it
    gate.set()
    wait_for(lambda: explainer.want("other", "shared", lambda stop: "again") == "shared", 60, "the shared result")


def test_a_failed_explanation_says_why_and_the_thread_goes_on():
    explainer = Explainer()

    def broken(stop):
        raise RuntimeError("not enough memory for this model")

    explainer.begin("s")
    explainer.want("s", "broken", broken)
    result = wait_for(lambda: explainer.want("s", "broken", broken), 60, "the failure")
    assert result == Failed("RuntimeError: not enough memory for this model")
    assert wait_for(lambda: explainer.want("s", "next", lambda stop: 42), 60, "the next explanation") == 42


def test_integrated_gradients_stops_when_asked_and_gives_the_same_map_when_not(trained_ckpt, sample):
    predictor = Predictor.from_checkpoint(trained_ckpt)
    digit = (sample.test_x[0].float() / 255).numpy()
    with pytest.raises(Stopped):
        predictor.attribution(digit, should_stop=lambda: True)
    asked = []
    with pytest.raises(Stopped):  # asked again between chunks of steps, not only once at the start
        predictor.attribution(digit, should_stop=lambda: asked.append(1) or len(asked) > 1)
    np.testing.assert_allclose(predictor.attribution(digit, should_stop=lambda: False), predictor.attribution(digit),
                               atol=1e-5)
