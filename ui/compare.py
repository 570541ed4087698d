"""The Compare page's parts: which matrix (the defaults, or one already in the runs folder), its summary table with
each entry's link to its group on the Runs page, and each entry's latest gradient-flow profile, read once per
version of its runs' files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from brnn_core import gradient_charts
from brnn_core.config import CELL_NAMES, TrainConfig
from brnn_core.data.datasets import default_dataset
from brnn_core.model import CELL_TITLES
from brnn_core.runs.bands import file_version
from brnn_core.runs.gradient_flow import FILE as FLOW_FILE
from brnn_core.runs.gradient_flow import run_profile
from brnn_core.runs.index import RunIndex
from brnn_core.runs.matrix import DIRECTION_WORDS, Found, Standing, found_matrices, shown
from brnn_core.runs.rundir import Run
from ui import drawings as my
from ui.common import memo
from ui.groups import GROUP_PARAM

DEFAULTS = "defaults"  # the Settings choice of TrainConfig's defaults
KEYS = {"cells": "cmp_cells", "directions": "cmp_directions", "seeds": "cmp_seeds", "epochs": "cmp_epochs"}
SHOWN_FIELDS = ("dataset", "hidden_size", "num_layers", "batch_size", "lr", "epochs", "optimizer", "amp", "head")


def differences(values: dict) -> str:
    """The settings of `values` that differ from the defaults, 'hidden_size 8, num_layers 1, …'."""
    defaults = TrainConfig().to_dict()
    diff = [f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items()
            if k in SHOWN_FIELDS and k != "dataset" and v != defaults.get(k)]
    return ", ".join(diff[:6]) + (", …" if len(diff) > 6 else "") if diff else "the defaults"


def found_label(found: Found) -> str:
    cells = ", ".join(CELL_TITLES[c] for c in found.cells)
    ways = ", ".join(DIRECTION_WORDS[d] for d in found.directions)
    return (f"{cells} × {ways} · seeds {', '.join(map(str, found.seeds))} · {found.values.get('dataset')}, "
            f"{differences(found.values)} ({found.runs} runs)")


def fill(cells, directions, seeds, epochs) -> None:
    """Put the form's fields to a matrix's (before they are drawn: from a callback or the first run)."""
    st.session_state.update({KEYS["cells"]: list(cells), KEYS["directions"]: [DIRECTION_WORDS[d] for d in directions],
                             KEYS["seeds"]: ", ".join(map(str, seeds)), KEYS["epochs"]: int(epochs)})


def settings(index: RunIndex, data_dir: Path) -> dict:
    """The Settings picker (the defaults, or a matrix found in the runs folder: its settings and the entries and
    seeds it has fill the fields below) and the shared settings it chose, as typed."""
    table = index.table()
    seen = (tuple(table["run_id"]), tuple(table["state"]))  # found again only when a run came, went or changed state
    found = {f.key: f for f in memo("cmp_found", seen, lambda: found_matrices(index))}
    defaults = {"dataset": default_dataset(data_dir)}
    if KEYS["cells"] not in st.session_state:
        fill(CELL_NAMES, (True, False), (0, 1, 2), TrainConfig().epochs)
    if st.session_state.get("cmp_base") not in (DEFAULTS, *found):
        st.session_state["cmp_base"] = DEFAULTS

    def picked() -> None:
        chosen = found.get(st.session_state["cmp_base"])
        if chosen is None:
            fill(CELL_NAMES, (True, False), (0, 1, 2), TrainConfig().epochs)
        else:
            fill(chosen.cells, chosen.directions, chosen.seeds, chosen.values.get("epochs", 0))

    choice = st.selectbox("Settings", [DEFAULTS, *found], key="cmp_base", on_change=picked,
                          format_func=lambda k: f"The defaults ({defaults['dataset']})" if k == DEFAULTS
                          else found_label(found[k]),
                          help="What every run of the matrix shares: the Train form's defaults, or the settings of a "
                               "matrix already in the runs folder (made here or by `python -m brnn_core compare`), "
                               "whose runs then fill the table. Epochs below override them.")
    return dict(defaults if choice == DEFAULTS else found[choice].values)


@st.cache_data(max_entries=512, show_spinner=False)
def _latest_profile(run_path: str, version: tuple | None) -> pd.DataFrame:
    return run_profile(Path(run_path))


def flow_figure(now: Standing, runs_dir: Path, layer: int):
    """Each entry's latest gradient-flow profile (the mean over its runs) side by side; built again only when one
    of the runs' gradient_flow.csv changed (a stat per run on a rerun), each file read again only then."""
    files = {entry: [(str(Path(runs_dir) / run_id), file_version(Path(runs_dir) / run_id / FLOW_FILE))
                     for run_id in now.run_ids(entry)] for entry in now.matrix.entries}

    def build():
        profiles = {}
        for entry, paths in files.items():
            frames = [prof for prof in (_latest_profile(path, version) for path, version in paths) if len(prof)]
            if frames:
                profiles[entry.cell, entry.bidirectional] = pd.concat(frames).groupby(
                    ["layer", "direction", "row"], as_index=False)["grad_norm"].mean()
        revision = "flow-" + "-".join(now.matrix.groups.values())  # another matrix: a fresh zoom
        return gradient_charts.flow_matrix_figure(profiles, now.matrix.entries, layer, revision=revision)

    return memo("cmp_flow", (tuple((e, tuple(p)) for e, p in files.items()), layer), build)


def summary_table(now: Standing, runs_dir: Path, data_dir: Path) -> pd.DataFrame:
    """The matrix's table as the CLI prints it, with its done runs' scores on the saved drawings (read, computed in
    the background: never here)."""
    done = [p.run_id for p in now.places if p.done]
    stored = my.scores([Run(runs_dir / run_id).best_ckpt for run_id in done], data_dir)
    scores = {run_id: (s.accuracy if s else None) for run_id, s in zip(done, stored.values(), strict=True)}
    return shown(now.summary(scores))


def group_links(now: Standing) -> None:
    """A link per entry to its seed group on the Runs page (filtered to it, its band drawn)."""
    columns = st.columns(len(now.matrix.entries))
    for column, entry in zip(columns, now.matrix.entries, strict=True):
        column.page_link("pages/runs.py", label=entry.label, icon=":material/table_chart:",
                         query_params={GROUP_PARAM: now.matrix.groups[entry]},
                         help=f"Seed group {now.matrix.groups[entry]} on the Runs page",
                         disabled=not now.run_ids(entry))
