"""Plotly figures for the dashboard, built from run-directory DataFrames.

Pure functions (no Streamlit) so they can be tested and reused from a notebook. Every
figure sets `uirevision`, so a redraw with new points keeps the user's zoom and pan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from brnn_core.series import GroupCurve, ema, group_curve

LAYOUT = dict(margin=dict(l=10, r=10, t=40, b=10), height=300, legend=dict(orientation="h", y=-0.25),
              hovermode="x unified")


def _figure(title: str, revision: str, *, x_title: str, y_title: str, log_y: bool = False) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, uirevision=revision, xaxis_title=x_title, yaxis_title=y_title, **LAYOUT)
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def note_if_empty(fig: go.Figure, text: str) -> go.Figure:
    """An empty chart says what it is waiting for instead of showing bare axes."""
    if not fig.data:
        fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                           font=dict(size=14, color="gray"))
        fig.update_xaxes(showticklabels=False)
        fig.update_yaxes(showticklabels=False)
    return fig


def train_loss_figure(metrics: pd.DataFrame, *, smoothing: float = 0.6, log_y: bool = False,
                      revision: str = "train") -> go.Figure:
    """Per-step training loss: faint raw line plus the smoothed one."""
    fig = _figure("Training loss (per step)", revision, x_title="step", y_title="loss", log_y=log_y)
    train = metrics[metrics["split"] == "train"]
    if len(train):
        fig.add_scatter(x=train["step"], y=train["loss"], name="raw", mode="lines",
                        line=dict(color="rgba(31,119,180,0.3)", width=1))
        fig.add_scatter(x=train["step"], y=ema(train["loss"], smoothing), name=f"smoothed ({smoothing:.2f})",
                        mode="lines", line=dict(color="rgb(31,119,180)", width=2))
    return note_if_empty(fig, "waiting for the first logged steps…")


def epoch_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per finished epoch: mean training loss over the epoch, validation loss and accuracy."""
    train = metrics[metrics["split"] == "train"].copy()
    val = metrics[metrics["split"] == "val"]
    if not len(val):
        return pd.DataFrame(columns=["epoch", "train_loss", "val_loss", "val_acc", "step"])
    # A train row logged at fractional epoch e belongs to epoch ceil(e) (1-based).
    train["epoch_no"] = np.ceil(train["epoch"].round(6)).clip(lower=1)
    means = train.groupby("epoch_no")["loss"].mean()
    rows = []
    for _, v in val.iterrows():
        e = int(round(v["epoch"]))
        rows.append({"epoch": e, "train_loss": means.get(e, np.nan), "val_loss": v["loss"],
                     "val_acc": v["accuracy"], "step": v["step"]})
    return pd.DataFrame(rows)


MAX_EPOCH_TICKS = 10


def whole_epochs(fig: go.Figure, epochs: int) -> None:
    """A tick every 1, 2, 5, 10, ... epochs, at most MAX_EPOCH_TICKS: one per epoch runs together after a dozen."""
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if epochs / s <= MAX_EPOCH_TICKS)
    fig.update_xaxes(dtick=step, tick0=0 if step > 1 else 1)


def epoch_loss_figure(metrics: pd.DataFrame, *, revision: str = "epoch") -> go.Figure:
    fig = _figure("Loss per epoch", revision, x_title="epoch", y_title="loss")
    table = epoch_table(metrics)
    if len(table):
        fig.add_scatter(x=table["epoch"], y=table["train_loss"], name="train", mode="lines+markers")
        fig.add_scatter(x=table["epoch"], y=table["val_loss"], name="validation", mode="lines+markers")
    whole_epochs(fig, int(table["epoch"].max()) if len(table) else 1)
    return note_if_empty(fig, "appears after the first epoch")


def accuracy_figure(metrics: pd.DataFrame, *, revision: str = "acc") -> go.Figure:
    fig = _figure("Validation accuracy", revision, x_title="epoch", y_title="accuracy (%)")
    table = epoch_table(metrics)
    if len(table):
        fig.add_scatter(x=table["epoch"], y=100 * table["val_acc"], name="validation", mode="lines+markers",
                        line=dict(color="rgb(44,160,44)"))
    whole_epochs(fig, int(table["epoch"].max()) if len(table) else 1)
    return note_if_empty(fig, "appears after the first epoch")


def lr_figure(plan: tuple[list[int], list[float]], *, revision: str = "lr") -> go.Figure:
    """The learning rate by step: `plan` (progress.lr_plan) is the schedule's past and planned lr to the planned
    last step, so the figure changes only when the lr or the plan is changed live, not with every logged step:
    the browser redraws a chart only when its figure changes, and every redraw costs a 2-core machine training
    speed (docs/decisions/008-live-refresh-interval.md)."""
    fig = _figure("Learning rate", revision, x_title="step", y_title="lr", log_y=True)
    fig.update_yaxes(dtick=1, exponentformat="e")  # label powers of ten only: minor "2" and "5" read as values
    if plan and plan[0]:
        fig.add_scatter(x=plan[0], y=plan[1], name="lr (schedule)", mode="lines")
    return note_if_empty(fig, "waiting for the first logged steps…")


COLOURS = plotly.colors.qualitative.Plotly  # one per overlaid run or group, in order: a band takes its mean's


def run_curve(metrics: pd.DataFrame, what: str, smoothing: float) -> tuple[pd.Series, np.ndarray] | None:
    """A run's (x, y) on a compare chart: smoothed training loss by step, or validation loss by epoch."""
    part = metrics[metrics["split"] == ("train" if what == "train" else "val")]
    if not len(part):
        return None
    if what == "train":
        return part["step"], ema(part["loss"], smoothing)
    return part["epoch"], part["loss"].to_numpy(dtype=float)


def frames_band(frames: Iterable[pd.DataFrame], what: str, smoothing: float = 0.0) -> GroupCurve | None:
    """A group's band on a compare chart from its runs' metrics DataFrames (each run smoothed first). The pages
    take a group's band from `RunIndex.band`, built once per version of its runs' files."""
    return group_curve(c for c in (run_curve(m, what, smoothing) for m in frames) if c is not None)


def _translucent(colour: str, alpha: float = 0.2) -> str:
    r, g, b = plotly.colors.hex_to_rgb(colour)
    return f"rgba({r},{g},{b},{alpha})"


def add_group(fig: go.Figure, name: str, curve: GroupCurve, colour: str, *, log_y: bool = False) -> None:
    """A group as its mean line and a ±1 std band of the same colour, translucent: the lower edge, then the
    upper edge filled down to it ('tonexty' fills to the trace before). On a log axis the lower edge stops three
    decades under the mean (mean - std may reach 0, which a log axis cannot draw). A group whose runs have no
    point in common draws nothing."""
    if not len(curve.x):
        return
    lower = np.maximum(curve.lower, curve.mean * 1e-3) if log_y else curve.lower
    band = dict(mode="lines", line=dict(width=0, color=colour), legendgroup=name, showlegend=False, hoverinfo="skip")
    if curve.n > 1:
        fig.add_scatter(x=curve.x, y=lower, name=f"{name} − std", **band)
        fig.add_scatter(x=curve.x, y=curve.upper, name=f"{name} + std", fill="tonexty",
                        fillcolor=_translucent(colour), **band)
    fig.add_scatter(x=curve.x, y=curve.mean, name=f"{name} mean ± std (n={curve.n})", mode="lines",
                    line=dict(color=colour, width=2), legendgroup=name, customdata=curve.std,
                    hovertemplate="%{y:.4f} ± %{customdata:.4f}")


def compare_figure(curves: dict[str, pd.DataFrame], *, smoothing: float = 0.6, what: str = "train",
                   log_y: bool = False, branches: Iterable = (),
                   groups: Mapping[str, GroupCurve | None] | None = None) -> go.Figure:
    """Overlay several runs: smoothed training loss by step, or validation loss by epoch.

    `groups` (name -> its band for this `what`: `RunIndex.band` or `frames_band`, each run smoothed first, so
    the band is the spread between seeds, not batch noise) draws each seed group as its mean with a ±1 std band
    (add_group), before the runs.
    A branch continues its parent's step (and epoch) axis, so parent and child share the x axis;
    `branches` (branch.BranchPoint: child, parent, checkpoint, step, epoch) marks where each
    child in `curves` leaves its parent with a dashed line, labelled."""
    title = "Training loss (smoothed)" if what == "train" else "Validation loss"
    fig = _figure(title, "compare-" + what, x_title="step" if what == "train" else "epoch", y_title="loss",
                  log_y=log_y)
    colours = iter(COLOURS * (1 + (len(curves) + len(groups or {})) // len(COLOURS)))
    for name, curve in (groups or {}).items():
        colour = next(colours)
        if curve is not None:
            add_group(fig, name, curve, colour, log_y=log_y)
    for name, metrics in curves.items():
        curve, colour = run_curve(metrics, what, smoothing), next(colours)
        if curve is not None:
            fig.add_scatter(x=curve[0], y=curve[1], name=name, mode="lines" if what == "train" else "lines+markers",
                            line=dict(color=colour))
    if fig.data:
        for point in branches:
            if point.child in curves:
                mark_branch(fig, point, point.step if what == "train" else point.epoch)
        if what == "val":  # epochs are whole: no tick at 1.2
            whole_epochs(fig, int(max(max(trace.x, default=1) for trace in fig.data if trace.x is not None)))
    return note_if_empty(fig, "no finished epoch in the selected runs" if what == "val" else "no data yet")


def mark_branch(fig: go.Figure, point, x: float) -> None:
    """A dashed vertical line where a branch left its parent, labelled 'child ← parent:checkpoint @ step'."""
    label = f"{_suffix(point.child)} ← {_suffix(point.parent)}:{point.checkpoint} @ step {point.step}"
    fig.add_vline(x=x, line_dash="dash", line_width=1, line_color="gray", annotation_text=label,
                  annotation_position="top left", annotation_font=dict(size=10, color="gray"))


def _suffix(run_id: str) -> str:
    """A run id's random suffix ('...-mnist-sample-ab12' -> 'ab12'): what tells runs apart in a label."""
    return run_id.rsplit("-", 1)[-1]


def probabilities_figure(probs: np.ndarray, classes: list[str]) -> go.Figure:
    top = int(np.argmax(probs))
    colors = ["rgb(214,39,40)" if i == top else "rgb(120,120,120)" for i in range(len(probs))]
    fig = go.Figure(go.Bar(x=classes, y=100 * probs, marker_color=colors,
                           text=[f"{100 * p:.1f}%" for p in probs], textposition="outside"))
    fig.update_layout(title="Class probabilities", yaxis=dict(range=[0, 110], title="%"),
                      xaxis=dict(type="category"), margin=dict(l=10, r=10, t=40, b=10), height=300)
    return fig


def confusion_figure(matrix: list[list[int]], classes: list[str]) -> go.Figure:
    m = np.asarray(matrix)
    fig = go.Figure(go.Heatmap(z=m, x=classes, y=classes, colorscale="Blues", text=m, texttemplate="%{text}",
                               hovertemplate="true %{y}, predicted %{x}: %{z}<extra></extra>"))
    fig.update_layout(title="Confusion matrix (test set)", xaxis=dict(title="predicted", type="category"),
                      yaxis=dict(title="true", type="category", autorange="reversed"),
                      margin=dict(l=10, r=10, t=40, b=10), height=420)
    return fig


def per_class_figure(per_class: list[float], classes: list[str]) -> go.Figure:
    fig = go.Figure(go.Bar(x=classes, y=[100 * a for a in per_class],
                           text=[f"{100 * a:.1f}%" for a in per_class], textposition="outside"))
    fig.update_layout(title="Per-class accuracy (test set)", yaxis=dict(range=[0, 110], title="%"),
                      xaxis=dict(type="category"), margin=dict(l=10, r=10, t=40, b=10), height=320)
    return fig


# ------------------------------------------------------------------ inside the model (Predict page)
READING_TITLE = "reads your digit, row by row"  # after "How the <network>" (model.network_name)
ATTRIBUTION_TITLE = "Which pixels decided"
# Transparent at zero so the digit shows through; blue pulled away from the class, red pushed towards it.
# Alpha rises quickly off zero: most of the mass is in many small pushes, not in the few largest.
_SIGNED = [[0.0, "rgba(33,102,172,1)"], [0.35, "rgba(67,147,195,0.75)"], [0.5, "rgba(255,255,255,0)"],
           [0.65, "rgba(214,96,77,0.75)"], [1.0, "rgba(178,24,43,1)"]]


def _image_trace(image: np.ndarray, *, zmax: float = 1.0, **kwargs) -> go.Heatmap:
    return go.Heatmap(z=np.asarray(image, dtype=float), colorscale="gray", zmin=0.0, zmax=zmax, showscale=False,
                      hovertemplate="row %{y}, col %{x}: %{z:.2f}<extra></extra>", **kwargs)


def reading_figure(image: np.ndarray, rows: np.ndarray, classes: list[str], *, network: str) -> go.Figure:
    """The 28x28 input beside a (28, C) heatmap of what the model thinks after each row, rows aligned; `network`
    names the model in the title ("two-way LSTM (BiLSTM)").

    Row t of the heatmap is the model run on image rows 0..t only, so a row of the picture and the
    model's opinion once it has read down to it sit side by side."""
    steps = rows.shape[0]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.03, column_widths=[0.4, 0.6],
                        subplot_titles=("input", "its prediction after each row"))
    fig.add_trace(_image_trace(image), row=1, col=1)
    fig.add_trace(go.Heatmap(z=100 * rows, x=list(classes), y=list(range(steps)), colorscale="Viridis", zmin=0,
                             zmax=100, colorbar=dict(title="%", len=0.9),
                             hovertemplate="after row %{y}: class %{x} %{z:.1f}%<extra></extra>"), row=1, col=2)
    fig.update_yaxes(autorange="reversed", title_text="row", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=2)
    fig.update_xaxes(showticklabels=False, row=1, col=1)
    fig.update_xaxes(type="category", title_text="predicted class", row=1, col=2)
    fig.update_layout(title=f"How the {network} {READING_TITLE}", height=380, margin=dict(l=10, r=10, t=70, b=10),
                      uirevision="reading")
    return fig


def attribution_figure(image: np.ndarray, attribution: np.ndarray, class_name: str) -> go.Figure:
    """Integrated-gradients attribution as a signed overlay on the (dimmed) 28x28 input.

    The colour scale ends at the 98th percentile of |attribution| on the ink, so one extreme pixel
    does not wash out the rest."""
    attr = np.asarray(attribution, dtype=float)
    ink = np.abs(attr)[np.asarray(image) > 0]
    bound = float(np.percentile(ink, 98)) if ink.size else 0.0
    bound = bound or float(np.abs(attr).max()) or 1.0
    fig = go.Figure([_image_trace(image, zmax=2.5, name="input"),
                     go.Heatmap(z=attr, colorscale=_SIGNED, zmin=-bound, zmax=bound, name="attribution",
                                colorbar=dict(title="push", len=0.9),
                                hovertemplate="row %{y}, col %{x}: %{z:.3f}<extra></extra>")])
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", showticklabels=False)
    fig.update_xaxes(showticklabels=False, constrain="domain")
    fig.update_layout(title=f"{ATTRIBUTION_TITLE}: {class_name}", height=380, margin=dict(l=10, r=10, t=50, b=10),
                      uirevision="attribution")
    return fig


INSIDE_COLOURS = {"h": "RdBu", "c": "RdBu", "candidate": "RdBu", "input": "Viridis", "forget": "Viridis",
                  "output": "Viridis", "reset": "Viridis", "update": "Viridis"}  # signed ones diverge around 0; gates
# (sigmoids) run from 0 to 1


def unit_order(values: np.ndarray) -> np.ndarray:
    """Units sorted by the row where each is most active (|value| largest), then by that value: units that
    fire on the same rows sit side by side, so bands across many units show."""
    values = np.abs(np.asarray(values, dtype=float))
    peak = values.argmax(axis=0)
    return np.lexsort((-values.max(axis=0), peak))


def internals_figure(values: np.ndarray, quantity: str, where: str) -> go.Figure:
    """Rows x units heatmap of one layer and direction's `quantity` (inference.internals), units in
    `unit_order`."""
    values = np.asarray(values, dtype=float)
    order = unit_order(values)
    signed = INSIDE_COLOURS.get(quantity) == "RdBu"
    bound = float(np.abs(values).max()) or 1.0
    fig = go.Figure(go.Heatmap(z=values[:, order], x=[str(u) for u in order], colorscale=INSIDE_COLOURS[quantity],
                               zmin=-bound if signed else 0.0, zmax=bound if signed else 1.0,
                               colorbar=dict(title=quantity, len=0.9),
                               hovertemplate="row %{y}, unit %{x}: %{z:.3f}<extra></extra>"))
    fig.update_yaxes(title="row", autorange="reversed")
    fig.update_xaxes(title="unit (ordered by the row where it peaks)", showticklabels=False, type="category")
    fig.update_layout(title=f"{quantity} · {where}", height=380, margin=dict(l=10, r=10, t=50, b=40),
                      uirevision="internals")
    return fig


def row_importance_figure(drop: np.ndarray, class_name: str) -> go.Figure:
    """Horizontal bars beside the image's rows: how much the log-odds of `class_name` drops with each row blanked
    (inference.explain.row_importance; negative: the row argued against it)."""
    drop = np.asarray(drop, dtype=float)
    fig = go.Figure(go.Bar(x=drop, y=list(range(len(drop))), orientation="h",
                           marker_color=["#b2182b" if d > 0 else "#2166ac" for d in drop],
                           hovertemplate="row %{y} blanked: log-odds %{x:.2f} lower, the odds × %{customdata:.2g}"
                                         "<extra></extra>", customdata=np.exp(-drop)))
    fig.update_yaxes(title="row", autorange="reversed", dtick=4)
    fig.update_xaxes(title=f"drop in log-odds of {class_name} (2.3 = odds ÷ 10)")
    fig.update_layout(title="Rows that mattered", height=380, margin=dict(l=10, r=10, t=50, b=40),
                      uirevision="row_importance")
    return fig


def state_path_figure(path: np.ndarray, class_paths: np.ndarray, classes: list[str], predicted: str) -> go.Figure:
    """The drawn digit's forward path h_0..h_27 in two principal components (thick, start and end marked) over
    each class's mean path (thin, its name at the end)."""
    fig = go.Figure()
    for name, mean in zip(classes, np.asarray(class_paths), strict=True):
        if not np.isfinite(mean).all():
            continue
        fig.add_trace(go.Scatter(x=mean[:, 0], y=mean[:, 1], mode="lines", line=dict(width=1, color="#bbbbbb"),
                                 name=f"class {name}", showlegend=False, hoverinfo="skip"))
        fig.add_annotation(x=mean[-1, 0], y=mean[-1, 1], text=name, showarrow=False, font=dict(color="#888888"))
    path = np.asarray(path)
    fig.add_trace(go.Scatter(x=path[:, 0], y=path[:, 1], mode="lines+markers", name="your digit",
                             line=dict(width=3, color="#d62728"), marker=dict(size=4),
                             customdata=np.arange(len(path)), hovertemplate="after row %{customdata}<extra></extra>"))
    fig.add_annotation(x=path[0, 0], y=path[0, 1], text="row 0", showarrow=True, arrowhead=1)
    fig.add_annotation(x=path[-1, 0], y=path[-1, 1], text=f"row {len(path) - 1} ({predicted})", showarrow=True,
                       arrowhead=1)
    fig.update_xaxes(title="component 1")
    fig.update_yaxes(title="component 2")
    fig.update_layout(title="The digit's path through state space (last layer, forward)", height=380,
                      margin=dict(l=10, r=10, t=50, b=40), showlegend=False, uirevision="state_path")
    return fig


def lr_find_figure(lrs: list[float], losses: list[float], smoothed: list[float], suggestion: float | None) -> go.Figure:
    """The lr range test: loss against lr on a log axis, raw and smoothed, the suggested lr marked."""
    fig = go.Figure([go.Scatter(x=lrs, y=losses, mode="lines", name="loss", line=dict(color="#cccccc", width=1)),
                     go.Scatter(x=lrs, y=smoothed, mode="lines", name="smoothed", line=dict(color="#1f77b4"))])
    if suggestion is not None:
        fig.add_vline(x=suggestion, line_dash="dash", line_color="#d62728",
                      annotation_text=f"suggested {suggestion:.2g}", annotation_position="top left")
    fig.update_xaxes(type="log", title="learning rate")
    fig.update_yaxes(title="training loss")
    fig.update_layout(title="Learning-rate range test", height=320, margin=dict(l=10, r=10, t=50, b=40),
                      legend=dict(orientation="h", y=-0.3), uirevision="lr_find")
    return fig
