"""The Predict page's "Inside the LSTM" expander: the drawn digit's gates and states row by row, the rows that
mattered, and integrated gradients with a choice of baseline and the randomised-weights sanity check.

Nothing here is computed while the expander is closed (its open state is the session's), so a stroke costs
what it cost without it.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from brnn_core import charts
from brnn_core.inference.explain import BASELINES
from brnn_core.inference.internals import DIRECTIONS, QUANTITIES
from brnn_core.inference.predictor import Predictor

QUANTITY_LABELS = {"h": "hidden state h", "c": "cell state c", "input": "input gate i", "forget": "forget gate f",
                   "candidate": "cell candidate g", "output": "output gate o"}
BASELINE_HELP = ("Integrated gradients sums each pixel's effect along a path from this baseline to your drawing. "
                 "From black, background pixels get exactly zero (they never differ from it); from a blurred copy, "
                 "what the sharp strokes add; from grey, ink and background alike.")


def inside_panel(predictor: Predictor, x: np.ndarray, top: int) -> None:
    """The expander for the model input `x` (28, 28) and its predicted class `top`."""
    with st.expander("Inside the LSTM: gates and states row by row, rows that mattered, a sanity check",
                     key="inside_open", on_change="rerun"):
        if not st.session_state.get("inside_open"):
            return
        cfg = predictor.checkpoint.model_config
        pick = st.columns(3)
        layer = pick[0].selectbox("Layer", list(range(1, cfg.num_layers + 1)), index=cfg.num_layers - 1,
                                  key="inside_layer")
        direction = pick[1].selectbox("Direction", DIRECTIONS, key="inside_direction")
        quantity = pick[2].selectbox("Quantity", QUANTITIES, format_func=QUANTITY_LABELS.get, key="inside_quantity")
        cells = predictor.internals(x).layers[layer - 1][direction]
        heat, rows = st.columns([3, 2])
        heat.plotly_chart(charts.internals_figure(cells.get(quantity).numpy(), quantity,
                                                  f"layer {layer}, {direction}"), key="inside_heatmap",
                          on_select="ignore")
        rows.plotly_chart(charts.row_importance_figure(predictor.row_importance(x, top), predictor.classes[top]),
                          key="inside_rows", on_select="ignore")
        read = ("rows 0..t (top down)" if direction == "forward" else "rows 27..t (bottom up): at row 0 it has "
                "read the whole image")
        st.caption(f"At row t the {direction} direction has read {read}. Units are ordered by the row where each "
                   "is most active, so units that fire together sit side by side; most single units mean nothing "
                   "on their own: look for bands across many. Rows that mattered: each row blanked in turn, how "
                   f"much P({predictor.classes[top]}) drops (negative: that row argued against it).")

        st.markdown("**Which pixels decided, and is that explanation worth anything?**")
        choose = st.columns([2, 2])
        baseline = choose[0].radio("Baseline", BASELINES, horizontal=True, key="inside_baseline", help=BASELINE_HELP)
        sanity = choose[1].toggle("Sanity check: the same for random weights", key="inside_sanity",
                                  help="An attribution that looks the same for a copy of the model with random "
                                       "weights explains nothing about what was learned.")
        if baseline == "black" and not sanity:
            st.caption("The map above (Which pixels decided) is from black: pick another baseline, or the sanity "
                       "check, to compare.")
            return
        maps = st.columns(2 if sanity else 1)
        name = predictor.classes[top]
        trained = predictor.attribution(x, top, baseline=baseline)
        maps[0].plotly_chart(charts.attribution_figure(x, trained, f"{name}, from {baseline}"),
                             key="inside_attribution", on_select="ignore")
        if sanity:
            random_map = predictor.attribution(x, top, baseline=baseline, randomized=True)
            fig = charts.attribution_figure(x, random_map, f"{name}, random weights")
            maps[1].plotly_chart(fig, key="inside_attribution_random", on_select="ignore")
            corr = float(np.corrcoef(trained.ravel(), random_map.ravel())[0, 1])
            st.caption(f"Correlation between the two maps: {corr:.2f}. Close to 1 would mean the map shows the "
                       "input's shape, not what the model learned.")
