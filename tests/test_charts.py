"""The dashboard's figures: smoothing maths and per-epoch aggregation (no Streamlit needed)."""

import numpy as np
import pandas as pd
import plotly.colors
import pytest

from brnn_core import charts
from brnn_core.runs.progress import lr_plan
from brnn_core.runs.rundir import METRIC_COLUMNS


def metrics_frame(rows):
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def test_ema_zero_weight_is_identity_and_debiased_start():
    values = np.array([4.0, 2.0, 3.0, 1.0])
    assert np.allclose(charts.ema(values, 0.0), values)
    smoothed = charts.ema(values, 0.9)
    # TensorBoard's debiasing: the first point is the raw value, not 10% of it.
    assert smoothed[0] == 4.0
    assert np.isclose(smoothed[1], (0.9 * 0.1 * 4.0 + 0.1 * 2.0) / (1 - 0.9**2))
    assert smoothed[-1] > values[-1]  # lags behind a falling curve


def test_ema_keeps_nan_points_without_poisoning_the_rest():
    smoothed = charts.ema(np.array([1.0, np.nan, 1.0]), 0.5)
    assert np.isnan(smoothed[1]) and smoothed[2] == 1.0


def test_epoch_table_averages_train_rows_of_each_epoch():
    df = metrics_frame([
        (10, 0.5, "train", 2.0, None, 0.01, 100.0, 1.0),
        (20, 1.0, "train", 1.0, None, 0.01, 100.0, 2.0),
        (20, 1.0, "val", 0.9, 0.7, 0.01, None, 2.1),
        (30, 1.5, "train", 0.6, None, 0.01, 100.0, 3.0),
        (40, 2.0, "train", 0.4, None, 0.01, 100.0, 4.0),
        (40, 2.0, "val", 0.5, 0.85, 0.01, None, 4.1),
    ])
    table = charts.epoch_table(df)
    assert list(table["epoch"]) == [1, 2]
    assert list(table["train_loss"]) == [1.5, 0.5]
    assert list(table["val_acc"]) == [0.7, 0.85]


def test_figures_keep_zoom_and_explain_empty_charts():
    empty = metrics_frame([])
    fig = charts.train_loss_figure(empty, revision="run-1")
    assert fig.layout.uirevision == "run-1"
    assert not fig.data and "waiting" in fig.layout.annotations[0].text
    df = metrics_frame([(10, 0.5, "train", 2.0, None, 0.01, 100.0, 1.0),
                        (20, 1.0, "train", 1.0, None, 0.001, 90.0, 2.0)])
    fig = charts.train_loss_figure(df, smoothing=0.5, log_y=True, revision="run-1")
    assert [t.name for t in fig.data] == ["raw", "smoothed (0.50)"]
    assert fig.layout.yaxis.type == "log"
    empty_lr = charts.lr_figure(([], []))
    assert not empty_lr.data and "waiting" in empty_lr.layout.annotations[0].text


def test_a_live_lr_chart_changes_only_with_the_lr():
    """Drawn from the schedule's plan to the planned last step, the figure stays the same while steps arrive at
    one lr: the browser then skips the redraw (each costs training speed on a small machine)."""
    config = {"train": {"lr": 0.01, "lr_schedule": "constant", "epochs": 2}}
    status = {"steps_per_epoch": 50}
    before = charts.lr_figure(lr_plan(config, status, [])).to_json()
    assert charts.lr_figure(lr_plan(config, {**status, "step": 30}, [])).to_json() == before
    live = [{"kind": "set", "field": "lr", "step": 40, "new": 0.001}]
    changed = charts.lr_figure(lr_plan(config, status, live))
    assert changed.to_json() != before and changed.data[0].y[-1] == pytest.approx(0.001)
    assert changed.data[0].x[-1] == 99  # to the planned last step (steps count from 0)


def test_probability_and_confusion_figures():
    probs = np.array([0.1, 0.7, 0.2])
    fig = charts.probabilities_figure(probs, ["a", "b", "c"])
    assert list(fig.data[0].x) == ["a", "b", "c"] and fig.data[0].marker.color[1] == "rgb(214,39,40)"
    conf = charts.confusion_figure([[5, 1], [0, 4]], ["0", "1"])
    assert conf.data[0].z.tolist() == [[5, 1], [0, 4]]


def test_reading_figure_lines_rows_up_with_the_image():
    rng = np.random.default_rng(0)
    image = rng.random((28, 28))
    rows = rng.dirichlet(np.ones(10), size=28)  # (28, 10), each row sums to 1
    fig = charts.reading_figure(image, rows, [str(i) for i in range(10)], network="one-way GRU")
    picture, heat = fig.data
    np.testing.assert_allclose(np.asarray(picture.z), image)
    np.testing.assert_allclose(np.asarray(heat.z), 100 * rows)
    assert list(heat.y) == list(range(28)) and list(heat.x) == [str(i) for i in range(10)]
    # One shared, reversed y axis: row 0 at the top of both, so image row t sits beside heatmap row t.
    assert picture.yaxis == "y" and heat.yaxis == "y2" and fig.layout.yaxis2.matches == "y"
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis2.autorange == "reversed"
    assert fig.layout.title.text == f"How the one-way GRU {charts.READING_TITLE}"


def test_attribution_overlay_scale_ignores_one_extreme_pixel():
    image = np.zeros((28, 28))
    image[10:18, 10:18] = 1.0  # 64 ink pixels
    attr = np.zeros((28, 28))
    attr[10:18, 10:18] = np.linspace(-1, 1, 64).reshape(8, 8)
    attr[12, 12] = 50.0  # an outlier
    fig = charts.attribution_figure(image, attr, "7")
    base, overlay = fig.data
    bound = np.percentile(np.abs(attr[image > 0]), 98)
    assert overlay.zmin == -bound and overlay.zmax == bound and bound < 50
    np.testing.assert_allclose(np.asarray(overlay.z), attr)
    assert overlay.colorscale[2][1] == "rgba(255,255,255,0)"  # zero attribution is see-through
    assert fig.layout.title.text == f"{charts.ATTRIBUTION_TITLE}: 7"


def test_epoch_axes_keep_their_ticks_apart_on_long_runs():
    """One tick per epoch runs together ('0123456789101112…') after a dozen epochs: at most ten ticks."""
    rows = [{"step": 10 * e, "epoch": e, "split": split, "loss": 1.0 / e, "accuracy": 0.5, "lr": 0.01,
             "samples_per_s": 1.0, "elapsed_s": float(e)} for e in range(1, 41) for split in ("train", "val")]
    metrics = pd.DataFrame(rows, columns=METRIC_COLUMNS)
    for figure in (charts.epoch_loss_figure(metrics), charts.accuracy_figure(metrics)):
        assert 40 / figure.layout.xaxis.dtick <= charts.MAX_EPOCH_TICKS
        assert figure.layout.xaxis.dtick in (5, 10)
    short = charts.epoch_loss_figure(metrics[metrics["epoch"] <= 3])
    assert short.layout.xaxis.dtick == 1


def test_group_curve_is_the_mean_and_sample_std_on_the_steps_every_run_has():
    curve = charts.group_curve([([1, 2, 3], [1.0, 2.0, 3.0]),
                                ([1, 2, 3, 4], [3.0, 4.0, 5.0, 9.0]),  # a step the others lack: left out
                                ([1, 2, 2, 3], [2.0, 0.0, 3.0, 4.0])])  # step 2 logged twice: the last counts
    assert curve.n == 3
    assert list(curve.x) == [1, 2, 3]
    np.testing.assert_allclose(curve.mean, [2.0, 3.0, 4.0])
    np.testing.assert_allclose(curve.std, [1.0, 1.0, 1.0])  # ddof=1: sqrt(((1)^2 + 0 + (1)^2) / 2)
    np.testing.assert_allclose(curve.lower, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(curve.upper, [3.0, 4.0, 5.0])
    alone = charts.group_curve([([5, 6], [0.5, 0.25]), ([], [])])  # a run without points does not count
    assert alone.n == 1 and np.isnan(alone.std).all() and list(alone.mean) == [0.5, 0.25]
    assert charts.group_curve([([], [])]) is None


def seed_metrics(offset: float) -> pd.DataFrame:
    """A run's metrics: 4 train points and 2 validation points, its losses shifted by `offset`."""
    rows = [(s, s / 4, "train", 2.0 - s / 4 + offset, None, 0.01, 100.0, float(s)) for s in (1, 2, 3, 4)]
    rows += [(2 * e, e, "val", 1.5 - e / 4 + offset, 0.5, 0.01, None, float(e)) for e in (1, 2)]
    return metrics_frame(rows)


def test_compare_figure_draws_a_group_as_its_mean_inside_a_translucent_band():
    group = {"a": seed_metrics(0.0), "b": seed_metrics(0.2), "c": seed_metrics(0.4)}
    band = charts.frames_band(group.values(), "train", smoothing=0.0)
    fig = charts.compare_figure({"single": seed_metrics(1.0)}, smoothing=0.0, what="train", groups={"g1": band})
    lower, upper, mean, single = fig.data
    assert mean.name == "g1 mean ± std (n=3)" and single.name == "single"
    assert upper.fill == "tonexty" and lower.fill is None  # the band fills from the upper edge down to the lower
    colour = mean.line.color
    assert lower.line.color == upper.line.color == colour != single.line.color
    r, g, b = plotly.colors.hex_to_rgb(colour)
    assert upper.fillcolor == f"rgba({r},{g},{b},0.2)"
    assert not lower.showlegend and not upper.showlegend and mean.showlegend is not False
    np.testing.assert_allclose(mean.y, [1.95, 1.7, 1.45, 1.2])  # 2 - s/4 + mean offset 0.2
    np.testing.assert_allclose(np.asarray(upper.y) - np.asarray(mean.y), 0.2)  # std of 0, 0.2, 0.4
    np.testing.assert_allclose(np.asarray(mean.y) - np.asarray(lower.y), 0.2)
    val = charts.compare_figure({}, what="val", groups={"g1": charts.frames_band(group.values(), "val")})
    assert list(val.data[2].x) == [1, 2]  # validation by epoch
    np.testing.assert_allclose(val.data[2].y, [1.45, 1.2])


def test_a_group_band_is_smoothed_per_run_and_stays_positive_on_a_log_axis():
    group = {"a": seed_metrics(0.0), "b": seed_metrics(0.0), "c": seed_metrics(10.0)}  # std 5.8 > mean 5.1
    fig = charts.compare_figure({}, smoothing=0.5, what="train", groups={"g": charts.frames_band(group.values(),
                                                                                              "train", 0.5)},
                                log_y=True)
    lower, upper, mean = fig.data
    smoothed = [charts.ema(m[m.split == "train"]["loss"], 0.5) for m in group.values()]
    np.testing.assert_allclose(mean.y, np.mean(smoothed, axis=0))
    assert (np.asarray(lower.y) > 0).all()
    np.testing.assert_allclose(lower.y, np.asarray(mean.y) * 1e-3)
    assert fig.layout.yaxis.type == "log"
