"""The Predict page's "Inside the <network>" expander: the drawn digit's states (and the cell's gates) row by row,
the rows that mattered, and integrated gradients with a choice of baseline and the randomised-weights sanity check.

Nothing here is computed while the expander is closed (its open state is the session's); while it is open, what
takes time is worked out in the background (ui/explaining.py), so a stroke never waits for it. Its words are in
ui/cells.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import streamlit as st

from brnn_core import charts
from brnn_core.checkpoint import CheckpointError
from brnn_core.data.datasets import DatasetError
from brnn_core.inference.explain import BASELINES
from brnn_core.inference.internals import QUANTITIES, Internals, directions_of
from brnn_core.inference.predictor import Predictor
from brnn_core.inference.state_space import (
    TrainingStates,
    activations_path,
    build_activations,
    build_for_checkpoint,
    load_activations,
    states_path,
)
from brnn_core.model import network_name
from ui import cells as words
from ui.background import BackgroundJobs
from ui.explaining import Explanations, shown

BASELINE_HELP = ("Integrated gradients sums each pixel's effect along a path from this baseline to your drawing. "
                 "From black, background pixels get exactly zero (they never differ from it); from a blurred copy, "
                 "what the sharp strokes add; from grey, ink and background alike.")


def inside_panel(predictor: Predictor, x: np.ndarray, top: int, checkpoint: str, data_dir: Path,
                 explain: Explanations) -> None:
    """The expander for the model input `x` (28, 28) and its predicted class `top` (`checkpoint`: its file,
    beside which the training digits' states are kept); what takes time is worked out in the background
    (`explain`)."""
    cfg = predictor.checkpoint.model_config
    what = "its state" if cfg.cell == "rnn" else "gates and states"
    with st.expander(f"Inside the {network_name(cfg)}: {what} row by row, rows that mattered, a sanity check",
                     key="inside_open", on_change="rerun"):
        if not st.session_state.get("inside_open"):
            return
        layer, direction, quantity = pick_cells(predictor)
        found = explain.get(("inside", top), lambda stop: (predictor.internals(x), predictor.row_importance(x, top)))
        st.caption(f"**{words.label(cfg.cell, quantity).capitalize()}.** {words.hint(cfg.cell, quantity)}")
        heat, rows = st.columns([3, 2])
        if shown(heat, found, "the states row by row"):
            inside, drop = found
            cells = inside.layers[layer - 1][direction]
            heat.plotly_chart(charts.internals_figure(cells.get(quantity).numpy(), quantity,
                                                      f"layer {layer}, {direction}"), key="inside_heatmap",
                              on_select="ignore")
            rows.plotly_chart(charts.row_importance_figure(drop, predictor.classes[top]), key="inside_rows",
                              on_select="ignore")
            rows.caption(words.rows_note(predictor.classes[top]))
            st.caption(words.reading_note(direction, network_name(cfg), bidirectional=cfg.bidirectional))
            state_space_section(predictor, inside, (layer, direction, quantity), top, checkpoint, data_dir)
        attribution_checks(predictor, x, top, explain)


def attribution_checks(predictor: Predictor, x: np.ndarray, top: int, explain: Explanations) -> None:
    """Integrated gradients from another baseline, and the same for random weights (the sanity check)."""
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
    trained = explain.get(("attribution", baseline, False, top),
                          lambda stop: predictor.attribution(x, top, baseline=baseline, should_stop=stop))
    if shown(maps[0], trained, f"which pixels decided, from {baseline}"):
        maps[0].plotly_chart(charts.attribution_figure(x, trained, f"{name}, from {baseline}"),
                             key="inside_attribution", on_select="ignore")
    if not sanity:
        return
    random_map = explain.get(("attribution", baseline, True, top),
                             lambda stop: predictor.attribution(x, top, baseline=baseline, randomized=True,
                                                                should_stop=stop))
    if shown(maps[1], random_map, "the same for random weights"):
        fig = charts.attribution_figure(x, random_map, f"{name}, random weights")
        maps[1].plotly_chart(fig, key="inside_attribution_random", on_select="ignore")
    if isinstance(trained, np.ndarray) and isinstance(random_map, np.ndarray):
        corr = float(np.corrcoef(trained.ravel(), random_map.ravel())[0, 1])
        st.caption(f"Correlation between the two maps: {corr:.2f}. Close to 1 would mean the map shows the "
                   "input's shape, not what the model learned.")


def pick_cells(predictor: Predictor) -> tuple[int, str, str]:
    """The layer (from 1), direction and quantity to show, from what this checkpoint has: a choice made for another
    checkpoint (more layers, another cell) falls back to the last layer's forward h. One-way: no direction to pick."""
    cfg = predictor.checkpoint.model_config
    directions, quantities = directions_of(predictor.model), QUANTITIES[cfg.cell]
    layers = list(range(1, cfg.num_layers + 1))
    for key, options, fallback in (("inside_layer", layers, layers[-1]), ("inside_direction", directions, "forward"),
                                   ("inside_quantity", quantities, "h")):
        if st.session_state.get(key, fallback) not in options:
            st.session_state[key] = fallback
    pick = st.columns(3)
    layer = pick[0].selectbox("Layer", layers, index=len(layers) - 1, key="inside_layer")
    if len(directions) > 1:
        direction = pick[1].selectbox("Direction", directions, key="inside_direction")
    else:
        direction = directions[0]
        pick[1].caption("Direction: forward (one-way: the rows are read top down only)")
    quantity = pick[2].selectbox("Quantity", quantities, format_func=lambda q: words.label(cfg.cell, q),
                                 key="inside_quantity")
    return layer, direction, quantity


class StatesBuilder:
    """Builds a checkpoint's TrainingStates on a background thread (once per file); remembers why one failed."""

    def __init__(self):
        # an activations job that fails leaves no file: the page asks again on a later stroke
        self.jobs = BackgroundJobs("training-states", (CheckpointError, DatasetError, OSError, RuntimeError,
                                                       ValueError))
        self.failed: dict[str, str] = {}

    def ask(self, checkpoint: str, data_dir: Path) -> None:
        def build() -> None:
            try:
                build_for_checkpoint(Path(checkpoint), data_dir)
            except (CheckpointError, DatasetError, OSError, ValueError) as exc:
                self.failed[checkpoint] = str(exc)

        if checkpoint not in self.failed:
            self.jobs.ask(checkpoint, build)


@st.cache_resource
def states_builder() -> StatesBuilder:
    return StatesBuilder()


@st.cache_resource(max_entries=4, show_spinner=False)
def _states(path: str, version: tuple[int, int]) -> TrainingStates | None:
    return TrainingStates.load(Path(path))


def training_states(checkpoint: str, data_dir: Path) -> TrainingStates | str:
    """The checkpoint's stored states, or a line saying why there are none (yet): built in the background."""
    path = states_path(Path(checkpoint))
    try:
        stat = path.stat()
        if Path(checkpoint).stat().st_mtime <= stat.st_mtime:  # not older than the checkpoint it describes
            states = _states(str(path), (stat.st_mtime_ns, stat.st_size))
            if states is not None:
                return states
    except OSError:
        pass
    builder = states_builder()
    if checkpoint in builder.failed:
        return f"No training digits to compare with: {builder.failed[checkpoint]}"
    builder.ask(checkpoint, data_dir)
    return ("Reading the training digits' states once for this checkpoint, in the background: the path, the "
            "nearest digits and the matches appear with your next stroke.")


@st.cache_resource(max_entries=4, show_spinner=False)
def _activations(path: str, version: tuple[int, int]) -> np.ndarray | None:
    return load_activations(Path(path))


def training_activations(checkpoint: str, which: tuple[int, str, str]) -> np.ndarray | str:
    """The training digits' `which` (layer from 0, direction, quantity), or a line saying it is being read."""
    path = activations_path(Path(checkpoint), *which)
    try:
        stat = path.stat()
        if stat.st_mtime >= Path(checkpoint).stat().st_mtime:
            values = _activations(str(path), (stat.st_mtime_ns, stat.st_size))
            if values is not None:
                return values
    except OSError:
        pass
    builder = states_builder()
    builder.jobs.ask(str(path), lambda: build_activations(Path(checkpoint), *which))
    return ("Reading the training digits' values of this layer, direction and quantity once, in the background: "
            "the matches appear with your next stroke.")


def state_space_section(predictor: Predictor, inside: Internals, chosen: tuple[int, str, str], top: int,
                        checkpoint: str, data_dir: Path) -> None:
    """The digit's path over each class's mean path, its nearest training digits, and LSTMVis's match on the
    `chosen` (layer from 1, direction, quantity) of the heatmap above."""
    layer, direction, quantity = chosen
    states = training_states(checkpoint, data_dir)
    st.markdown("**Where the digit goes, and which training digits it is like**")
    if isinstance(states, str):
        st.caption(states)
        return
    last = inside.layers[-1]
    path_col, near_col = st.columns([3, 2])
    path_col.plotly_chart(charts.state_path_figure(states.path_of(last["forward"].h.numpy()), states.class_paths,
                                                   predictor.classes, predictor.classes[top]),
                          key="inside_path", on_select="ignore")
    final = inside.final().numpy()
    with near_col:
        st.caption(words.neighbours_note(len(final), bidirectional="backward" in last))
        thumbnails([(n.index, n.label, f"{n.distance:.2f}") for n in states.neighbours(final, 8)], states,
                   predictor.classes)
    st.caption(words.path_note(len(states.indices)))

    band = st.slider("Rows", 0, 27, (10, 18), key="inside_band", help="Units on across these rows are matched.")
    threshold = st.slider("On above (mean h over the rows)", 0.0, 0.9, 0.3, 0.05, key="inside_threshold")
    theirs = None  # the last layer's h is in the stored states; anything else is read once, in the background
    if (layer, quantity) != (len(inside.layers), "h"):
        theirs = training_activations(checkpoint, (layer - 1, direction, quantity))
        if isinstance(theirs, str):
            st.caption(theirs)
            return
    mine = inside.layers[layer - 1][direction].get(quantity).numpy()
    what = f"layer {layer}'s {direction} {words.label(predictor.checkpoint.model_config.cell, quantity)}"
    units, found = states.matches(mine, direction, band, threshold, theirs=theirs)
    if not len(units):
        st.caption(f"No unit of {what} is above {threshold:g} across rows {band[0]}-{band[1]}: lower the threshold "
                   "or move the band.")
        return
    st.caption(words.matches_note(len(units), what, band))
    thumbnails([(i, label, f"{score:.0%}") for i, label, score in found], states, predictor.classes)


def thumbnails(items: list[tuple[int, int, str]], states: TrainingStates, classes: list[str]) -> None:
    """Training digits (index into the training split, label, a number) as small images with their labels."""
    where = {int(i): k for k, i in enumerate(states.indices)}
    cols = st.columns(8)
    for k, (index, label, number) in enumerate(items):
        image = states.images[where[index]]
        cols[k % 8].image(np.kron(image, np.ones((2, 2), np.uint8)), caption=f"{classes[label]} · {number}",
                          clamp=True)
