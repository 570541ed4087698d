"""The Predict page's "Inside the LSTM" expander (ui/inside.py) in AppTest, on a real checkpoint and a real
MNIST digit: nothing computed while closed; opened, the heatmap for each quantity, the rows that mattered, the
attribution from each baseline and the random-weights sanity check."""

from __future__ import annotations

from helpers import build_app, no_exception


def panel(checkpoint: str, digit: list) -> None:
    import numpy as np

    from brnn_core.inference.predictor import Predictor
    from ui.inside import inside_panel

    predictor = Predictor.from_checkpoint(checkpoint)
    x = np.asarray(digit, dtype=np.float32)
    inside_panel(predictor, x, int(np.argmax(predictor.predict(x))))


def test_inside_the_lstm(finished, sample):
    digit = (sample.test_x[0].float() / 255).tolist()
    at = build_app(function=panel, args=(str(finished.best_ckpt), digit))
    at.run()
    no_exception(at)
    assert not at.get("plotly_chart")  # closed: nothing computed
    at.session_state["inside_open"] = True
    at.run()
    no_exception(at)
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert len(titles) == 2  # the heatmap and the rows that mattered (the page shows the black attribution)
    assert any("layer" in t and ", forward" in t for t in titles) and any("Rows that mattered" in t for t in titles)
    assert any("At row t the forward direction has read rows 0..t" in c.value for c in at.caption)
    for quantity in ("c", "forget", "candidate"):
        at.selectbox(key="inside_quantity").select(quantity).run()
        no_exception(at, quantity)
    at.selectbox(key="inside_direction").select("backward").run()
    assert any("bottom up" in c.value for c in at.caption)
    at.radio(key="inside_baseline").set_value("blurred").run()
    assert len(at.get("plotly_chart")) == 3
    at.toggle(key="inside_sanity").set_value(True).run()
    no_exception(at)
    assert len(at.get("plotly_chart")) == 4
    assert any(c.value.startswith("Correlation between the two maps:") for c in at.caption)
