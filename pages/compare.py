"""Compare page: which recurrent net, which direction. A matrix of cells × directions, a seed group each, started in
one click (the same matrix as `python -m brnn_core compare`) and watched as it fills in: each entry's loss curves as
a mean ± std band, its gradient flow through the rows, and the CLI's table."""

from __future__ import annotations

from ui.navigation import ensure_navigation

ensure_navigation()  # first, before PyTorch loads: see ui/navigation.py

import streamlit as st

from brnn_core import charts
from brnn_core.config import CELL_NAMES, ConfigError, epochs_auto_label
from brnn_core.runs.matrix import DIRECTION_WORDS, Matrix, MatrixError, standing
from brnn_core.runs.rundir import RunError
from brnn_core.runs.seeds import SeedsError, parse_seeds
from brnn_core.text import plural
from ui import compare
from ui.common import LIVE_REFRESH_S, flash, folders, memo, registry, run_index, show_flashes

FLOW_CAPTION = (
    "Each panel is one entry's latest measurement (the mean over its runs) of how strongly the loss reaches back to "
    "the hidden state after each image row (‖∂loss/∂h_t‖ on a fixed batch of training images, log scale; recorded "
    "every {every} steps): the forward reader in blue, the backward one in red. A plain RNN's fades by orders of "
    "magnitude over the rows before the one its reader read last; an LSTM's cell state carries it across the image.")

runs_dir, data_dir = folders()
st.title("Compare")
st.caption("What does reading backwards add? Why an LSTM and not a GRU or a plain RNN? Each cell read one way or "
           "both is one entry of the matrix, trained once per seed; each entry's runs are a seed group, drawn as its "
           "mean with a ±1 std band. The same as `python -m brnn_core compare`; runs already there are reused.")
show_flashes()
index = run_index(runs_dir)
values = compare.settings(index, data_dir)
c1, c2, c3, c4 = st.columns([2, 2, 1, 1])
cells = c1.multiselect("Cells", CELL_NAMES, key=compare.KEYS["cells"], format_func=str.upper,
                       help="lstm: gates and a cell state that carries memory; gru: two gates, no cell state; rnn: "
                            "Elman's plain tanh cell, no gates")
ways = c2.multiselect("Directions", list(DIRECTION_WORDS.values()), key=compare.KEYS["directions"],
                      help="two-way: each layer reads the rows top-down and bottom-up; one-way: top-down only")
seeds_text = c3.text_input("Seeds", key=compare.KEYS["seeds"], help="one run per seed in each entry, e.g. 0,1,2")
epochs = c4.number_input("Epochs", min_value=0, max_value=1000, key=compare.KEYS["epochs"],
                         help=f"Each run's epochs; {epochs_auto_label(values.get('dataset', 'mnist-sample'))}")
try:
    seeds = parse_seeds(seeds_text)
    matrix = Matrix.build({**values, "epochs": int(epochs)}, cells, [w == "two-way" for w in
                                                                     DIRECTION_WORDS.values() if w in ways], seeds)
except (MatrixError, ConfigError, SeedsError) as exc:
    st.info(f"Pick the matrix: {exc}", icon=":material/grid_view:")
    st.stop()
now = standing(index, matrix)
missing = now.missing()


def on_start() -> None:
    """Queue every seed the matrix still needs: a worker each, one after another on the device."""
    try:
        new = registry().start_many(runs_dir, missing, data_dir=data_dir)
    except (ConfigError, RunError, OSError) as exc:
        flash("error", f"Not started: {exc}")
        return
    flash("success", f"Queued {plural(len(new), 'run')}: they train one after another, and the matrix below fills "
                     "in as they do.")


done = sum(p.done for p in now.places)
s1, s2 = st.columns([1, 3], vertical_alignment="center")
s1.button(f"Start {plural(len(missing), 'run')}" if missing else "Nothing to start", type="primary",
          icon=":material/play_arrow:", on_click=on_start, disabled=not missing, key="cmp_start")
s2.caption(f"{len(matrix.entries)} entries × {plural(len(seeds), 'seed')}: {done} of {len(now.places)} runs done, "
           f"{len(now.active())} queued or training, {len(missing)} to train.")
o1, o2, o3 = st.columns([2, 1, 2], vertical_alignment="bottom")
smoothing = o1.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="cmp_smoothing")
log_y = o2.toggle("Log scale", value=True, key="cmp_log")
layers = list(range(1, int(matrix.bases[matrix.entries[0]].num_layers) + 1))
layer = o3.selectbox("Gradient flow: layer", layers, index=len(layers) - 1, key="cmp_layer",
                     help="Which recurrent layer's gradient flow to show (1 reads the image).")


def band_figure(groups: dict, what: str, log_y: bool):
    return charts.compare_figure({}, what=what, groups=groups, log_y=log_y).update_layout(
        legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"))


def live(active_before: bool) -> None:
    """The matrix as it stands: re-read on a timer while one of its runs is queued or training; when that changes,
    the whole page (its Start button) is redrawn."""
    here = standing(index, matrix)
    if bool(here.active()) != active_before:
        st.rerun()
    st.dataframe(compare.summary_table(here, runs_dir, data_dir), hide_index=True, key="cmp_table")
    compare.group_links(here)
    ids = {entry.label: tuple(here.run_ids(entry)) for entry in matrix.entries}
    bands = {what: {label: index.band(list(run_ids), what, smoothing if what == "train" else 0.0)
                    for label, run_ids in ids.items()} for what in ("train", "val")}
    for what in ("train", "val"):  # full width, the legend beside: six entries' names fit
        st.plotly_chart(memo(f"cmp_band_{what}", (tuple(bands[what].items()), log_y),
                             lambda what=what: band_figure(bands[what], what, log_y)),
                        key=f"cmp_band_{what}", on_select="ignore")
    st.plotly_chart(compare.flow_figure(here, runs_dir, layer), key="cmp_flow", on_select="ignore")
    st.caption(FLOW_CAPTION.format(every=matrix.bases[matrix.entries[0]].gradient_flow_every))


active = bool(now.active())
st.fragment(run_every=LIVE_REFRESH_S if active else None)(live)(active)
