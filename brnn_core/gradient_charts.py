"""Plotly figures of gradients through the rows: the gradient flow through time a run recorded (gradient_flow.csv:
a steps x rows heatmap per direction, and row profiles of one run or several side by side), and what each direction
of a trained net drew on for one drawn digit.

Pure functions of DataFrames and arrays, like charts.py (whose layout they share), so the Train page, a comparison
of runs and a notebook draw the same figures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from brnn_core.charts import LAYOUT, note_if_empty

DIRECTION_COLOURS = {"forward": "#1f77b4", "backward": "#d62728"}
RUN_DASHES = ("solid", "dot", "dash", "dashdot", "longdash", "longdashdot")
FLOW_AXIS = "‖∂loss/∂h_t‖ (log scale)"


def _log10(values: np.ndarray) -> np.ndarray:
    """log10 with 0 (a state no gradient reaches) as a gap, not minus infinity."""
    values = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), np.nan)


def flow_heatmap_figure(frame: pd.DataFrame, layer: int, *, revision: str = "flow") -> go.Figure:
    """Steps x rows heatmaps of log10 ‖∂loss/∂h_t‖ for `layer` (from 1) of a run's gradient_flow.csv, one per
    direction side by side, on one colour scale: bright where the loss reaches a row's state, dark where it fades.
    The scale spans the 2nd to the 95th percentile: the row each reader read last, which the classifier reads
    directly, would otherwise wash out the rest (the hover shows every value)."""
    here = frame[frame["layer"] == layer] if len(frame) else frame
    directions = [d for d in DIRECTION_COLOURS if len(here) and d in set(here["direction"])]
    if not directions:
        fig = go.Figure()
        fig.update_layout(title=f"Gradient flow through time · layer {layer}", uirevision=revision, **LAYOUT)
        return note_if_empty(fig, "waiting for the first measurement…")
    grids = {d: here[here["direction"] == d].pivot_table(index="step", columns="row", values="grad_norm")
             for d in directions}
    logs = np.concatenate([_log10(g.to_numpy()).ravel() for g in grids.values()])
    finite = logs[np.isfinite(logs)]
    low, high = (float(np.percentile(finite, 2)), float(np.percentile(finite, 95))) if finite.size else (0.0, 1.0)
    fig = make_subplots(rows=1, cols=len(directions), shared_yaxes=True, horizontal_spacing=0.08,
                        subplot_titles=directions)
    for col, d in enumerate(directions, 1):
        grid = grids[d]
        fig.add_trace(go.Heatmap(z=_log10(grid.to_numpy()), x=list(grid.columns), y=list(grid.index),
                                 customdata=grid.to_numpy(), zmin=low, zmax=high, colorscale="Viridis",
                                 colorbar=dict(title="log10", len=0.85), showscale=col == len(directions),
                                 hovertemplate="step %{y}, row %{x}: %{customdata:.3g}<extra>" + d + "</extra>"),
                      row=1, col=col)
        fig.update_xaxes(title_text=f"row, read {'0→27' if d == 'forward' else '27→0'}", row=1, col=col)
    fig.update_yaxes(title_text="training step", autorange="reversed", row=1, col=1)
    fig.update_layout(title=f"Gradient flow through time · layer {layer}", uirevision=revision,
                      **{**LAYOUT, "height": 360, "hovermode": "closest", "margin": dict(l=10, r=10, t=80, b=10)})
    return fig


def flow_profile_figure(profiles: dict[str, pd.DataFrame], layer: int, *, revision: str = "flow_profile",
                        title: str = "Latest profile") -> go.Figure:
    """‖∂loss/∂h_t‖ against the image row for `layer`, a line per direction (colour) of each run (dash); `profiles`
    maps a run's label to its profile (runs.gradient_flow.profile). One run: pass {"": profile}."""
    fig = go.Figure()
    for k, (label, prof) in enumerate(profiles.items()):
        here = prof[prof["layer"] == layer] if len(prof) else prof
        for d, colour in DIRECTION_COLOURS.items():
            line = here[here["direction"] == d].sort_values("row") if len(here) else here
            if not len(line):
                continue
            name = f"{label} · {d}" if label else d
            fig.add_scatter(x=line["row"], y=line["grad_norm"].where(line["grad_norm"] > 0), mode="lines+markers",
                            name=name, line=dict(color=colour, dash=RUN_DASHES[k % len(RUN_DASHES)]),
                            marker=dict(size=4), hovertemplate="row %{x}: %{y:.3g}<extra>" + name + "</extra>")
    fig.update_yaxes(type="log", dtick=1, title=FLOW_AXIS)  # a tick per power of ten
    fig.update_xaxes(title="image row", range=[-0.5, 27.5])
    fig.update_layout(title=f"{title} · layer {layer}", uirevision=revision, **{**LAYOUT, "height": 360,
                                                                                 "hovermode": "closest"})
    return note_if_empty(fig, "waiting for the first measurement…")


def direction_rows_figure(rows: dict[str, np.ndarray], class_name: str, unit: str) -> go.Figure:
    """Beside the image's rows, one bar per direction: how strongly that row's pixels move class `class_name`'s
    logit through that reader (`rows`: direction -> (T,) magnitudes in `unit`)."""
    fig = go.Figure()
    for d, values in rows.items():
        values = np.asarray(values, dtype=float)
        fig.add_bar(x=values, y=list(range(len(values))), orientation="h", name=f"{d} reader",
                    marker_color=DIRECTION_COLOURS.get(d), hovertemplate="row %{y}: %{x:.3g}<extra>" + d + "</extra>")
    fig.update_yaxes(title="row", autorange="reversed", dtick=4)
    fig.update_xaxes(title=f"gradient per row ({unit})")
    fig.update_layout(title=f"What each direction drew on: {class_name}", barmode="group", bargap=0.1, height=380,
                      margin=dict(l=10, r=10, t=50, b=40), legend=dict(orientation="h", y=-0.2),
                      uirevision="direction_rows")
    return fig


def flow_matrix_figure(profiles: dict[tuple[str, bool], pd.DataFrame], entries, layer: int, *,
                       revision: str = "flow-matrix") -> go.Figure:
    """A matrix's gradient flow side by side: one panel per entry (`entries`: objects with .cell, .bidirectional
    and .label; rows: two-way then one-way, columns: the cells), each the row profile of `layer` per direction
    (`profiles`: (cell, two-way) -> profile), on one log scale for every panel (set from the data: plotly's own
    autorange of matched log axes does not follow it) so a fading gradient reads against a carried one at a glance."""
    cells = list(dict.fromkeys(e.cell for e in entries))
    ways = [w for w in (True, False) if any(e.bidirectional == w for e in entries)]
    titles = {(e.cell, e.bidirectional): e.label for e in entries}
    fig = make_subplots(rows=len(ways), cols=len(cells), shared_xaxes=True, horizontal_spacing=0.04,
                        vertical_spacing=0.12, subplot_titles=[titles.get((c, w), "") for w in ways for c in cells])
    shown: set[str] = set()
    logs = []
    for r, way in enumerate(ways, 1):
        for c, cell in enumerate(cells, 1):
            prof = profiles.get((cell, way))
            here = prof[prof["layer"] == layer] if prof is not None and len(prof) else None
            for d, colour in DIRECTION_COLOURS.items():
                line = here[here["direction"] == d].sort_values("row") if here is not None else None
                if line is None or not len(line):
                    continue
                logs.append(_log10(line["grad_norm"].to_numpy()))
                fig.add_scatter(x=line["row"], y=line["grad_norm"].where(line["grad_norm"] > 0), mode="lines",
                                name=d, legendgroup=d, showlegend=d not in shown, line=dict(color=colour),
                                hovertemplate="row %{x}: %{y:.3g}<extra>" + f"{titles[cell, way]} · {d}</extra>",
                                row=r, col=c)
                shown.add(d)
    finite = np.concatenate(logs)[np.isfinite(np.concatenate(logs))] if logs else np.empty(0)
    span = [float(finite.min()) - 0.3, float(finite.max()) + 0.3] if finite.size else None
    decades = span[1] - span[0] if span else 1.0
    fig.update_yaxes(type="log", dtick=1 if decades <= 6 else 2 if decades <= 12 else 3, exponentformat="power",
                     range=span, showticklabels=False)
    fig.update_yaxes(title_text="‖∂loss/∂h_t‖", showticklabels=True, col=1)
    fig.update_xaxes(range=[-0.5, 27.5])
    fig.update_xaxes(title_text="image row", row=len(ways))
    fig.update_layout(title=f"Gradient flow through the rows, latest · layer {layer}", uirevision=revision,
                      **{**LAYOUT, "height": 260 * len(ways) + 80, "hovermode": "closest",
                         "margin": dict(l=10, r=10, t=80, b=10)})
    return note_if_empty(fig, "waiting for the first measurement…")
