"""The Train page's gradient flow through time: the selected run's gradient_flow.csv as a steps x rows heatmap per
direction for one layer and its latest profile, redrawn by the live panel; or why the run has none."""

from __future__ import annotations

import streamlit as st

from brnn_core import gradient_charts
from brnn_core.runs.gradient_flow import profile, read_gradient_flow
from brnn_core.runs.rundir import Run
from brnn_core.states import ACTIVE_STATES
from ui.common import memo

LAYER_KEY = "flow_layer"
LAYERS_KEY = "flow_layers"  # how many layers the run had that LAYER_KEY was last shown for
EXPLAINED = (
    "Each row of a heatmap is one measurement, on the same batch of training images every time: how strongly the "
    "loss reaches back to the hidden state after each image row, by every path through the later rows and the "
    "layers above (‖∂loss/∂h_t‖, the mean over the batch's images; log scale). A plain RNN's fades by orders of "
    "magnitude over the rows before its reader's last one; an LSTM's cell state carries it across the whole image. "
    "Recorded every {every} steps in the run's gradient_flow.csv.")


def layer_picker(container, train: dict) -> int:
    """The layer (from 1) whose gradient flow the panel shows, for the selected run's number of layers."""
    layers = list(range(1, int(train.get("num_layers") or 1) + 1))
    # A pick holds across runs with as many layers (comparing them); a run with another number starts at its last
    # layer, the one the reader reads, as a first look does: not at the layer a one-layer run left behind.
    if st.session_state.get(LAYER_KEY) not in layers or st.session_state.get(LAYERS_KEY) != len(layers):
        st.session_state[LAYER_KEY] = layers[-1]
    st.session_state[LAYERS_KEY] = len(layers)
    return container.selectbox("Gradient flow: layer", layers, key=LAYER_KEY,
                               help="Which recurrent layer's gradient flow through time to show (1 reads the image).")


def missing_reason(run: Run, train: dict, state: str | None) -> str:
    """Why the run has no gradient flow to show (yet)."""
    if "gradient_flow_every" not in train:
        return ("This run was trained before gradient flow was recorded, so it has no gradient_flow.csv. A new run, "
                "or a branch of this one, records it.")
    every = int(train["gradient_flow_every"] or 0)
    if every <= 0:
        return ("Gradient flow was off for this run (gradient_flow_every = 0). Set *Gradient flow every N steps* "
                "(Advanced) for the next run.")
    if state in ACTIVE_STATES:
        return f"Waiting for the first measurement (every {every} steps)…"
    if run.gradient_flow_path.is_file():
        return "gradient_flow.csv holds no complete measurement."
    return "gradient_flow.csv is missing from the run's folder: the run ended before its first measurement, or " \
           "the file was removed."


def gradient_flow_section(run: Run, train: dict, state: str | None, layer: int) -> None:
    """The heatmap and the latest profile of `layer`, or the reason there are none."""
    st.markdown("**Gradient flow through time**")
    path = run.gradient_flow_path
    size = path.stat().st_size if path.is_file() else 0
    frame = memo("flow_frame", (run.id, size), lambda: read_gradient_flow(path))
    if frame.empty:
        st.info(missing_reason(run, train, state), icon=":material/blur_linear:")
        return
    heat, line = memo("flow_figures", (run.id, size, layer), lambda: (
        gradient_charts.flow_heatmap_figure(frame, layer, revision=f"flow-{run.id}"),
        gradient_charts.flow_profile_figure({"": profile(frame)}, layer, revision=f"flow-profile-{run.id}",
                                            title=f"Latest profile (step {int(frame['step'].max())})")))
    left, right = st.columns([3, 2])
    left.plotly_chart(heat, key="chart_flow", on_select="ignore")
    right.plotly_chart(line, key="chart_flow_profile", on_select="ignore")
    st.caption(EXPLAINED.format(every=train.get("gradient_flow_every")))
