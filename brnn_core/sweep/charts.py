"""Plotly figures of a sweep: every trial's metric curve on one chart, and a parallel-coordinates plot.

Pure functions of the DataFrames records.py reads (no Streamlit), with `uirevision` so live redraws
keep the user's zoom, like the run charts in brnn_core/charts.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from brnn_core.charts import LAYOUT, note_if_empty
from brnn_core.sweep.records import METRICS, trial_number

PARCOORDS_TOP = 80  # px above the plot area: the title, then the axes' names and top values


def curves_figure(curves: dict[str, pd.DataFrame], metric: str, *, revision: str = "sweep") -> go.Figure:
    """The validation metric of every trial against epochs."""
    column = METRICS[metric][0]
    fig = go.Figure()
    fig.update_layout(title=f"{metric} of every trial", uirevision=revision, xaxis_title="epoch",
                      yaxis_title=metric, **{**LAYOUT, "hovermode": "closest"})
    for run_id, val in curves.items():
        if len(val):
            y = val[column] * (100 if column == "accuracy" else 1)
            fig.add_scatter(x=val["epoch"], y=y, mode="lines+markers", name=trial_number(run_id))
    fig.update_xaxes(dtick=1)  # whole epochs
    if column == "accuracy":
        fig.update_yaxes(title="val accuracy %")
    return note_if_empty(fig, "waiting for the first epoch of a trial…")


def _dimension(label: str, values: pd.Series, log: bool) -> dict:
    """One Parcoords axis: numbers as they are (log10 axis for loguniform), text as numbered categories."""
    if values.map(lambda v: isinstance(v, str)).any():
        names = sorted(values.astype(str).unique())
        codes = values.astype(str).map({n: i for i, n in enumerate(names)})
        return dict(label=label, values=codes.tolist(), tickvals=list(range(len(names))), ticktext=names)
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    if log and (numbers > 0).all():
        lo, hi = math.floor(np.log10(numbers.min())), math.ceil(np.log10(numbers.max()))
        ticks = list(range(lo, hi + 1))
        return dict(label=f"{label} (log)", values=np.log10(numbers).tolist(), tickvals=ticks,
                    ticktext=[f"1e{t}" for t in ticks])
    return dict(label=label, values=numbers.tolist())  # plain lists: the figure's JSON stays readable


def parcoords_figure(table: pd.DataFrame, keys: list[str], metric: str, *, log_keys: tuple[str, ...] = (),
                     revision: str = "sweep") -> go.Figure:
    """Searched fields of every trial with a score, one line each, coloured by its best metric."""
    column = f"best {metric}"
    scored = table.dropna(subset=[column]) if column in table else table.iloc[0:0]
    fig = go.Figure()
    fig.update_layout(title=f"Searched fields of every trial (colour: best {metric})", uirevision=revision,
                      **{k: v for k, v in LAYOUT.items() if k not in ("hovermode", "legend")})
    # Parcoords writes each axis's name and top value above the plot area, where a title would sit by default:
    # the title goes to the figure's top edge and the margin leaves the axis names a band of their own below it.
    fig.update_layout(title=dict(y=1, yref="container", yanchor="top", pad=dict(t=10)),
                      margin=dict(l=60, r=60, t=PARCOORDS_TOP, b=20), height=360)
    if not len(scored):
        return note_if_empty(fig, "the plot fills in as trials finish epochs…")
    scores = scored[column].astype(float).tolist()
    dims = [_dimension(k, scored[k], k in log_keys) for k in keys]
    dims.append(dict(label=column, values=scores))
    good_high = METRICS[metric][1] == "max"
    fig.add_trace(go.Parcoords(dimensions=dims, line=dict(color=scores, colorscale="Viridis",
                                                           reversescale=not good_high, showscale=True,
                                                           colorbar=dict(title=metric))))
    return fig
