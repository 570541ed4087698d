"""The Runs page's seed groups: the "Group seeds" switch, the folded table's columns, and a selected group opened
under the table (its runs, each of which can be overlaid beside the group's band)."""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from brnn_core.runs.groups import Folded, fold_groups, has_groups, unfolded
from brnn_core.runs.index import RunIndex
from ui.selection import follow

GROUP_PARAM = "group"  # /runs?group=ID: the Runs page filtered to one seed group (the Compare page links there)
SPREAD_COLUMNS = ("best_val_acc", "test_acc", "my_drawings_acc")  # in percent on the page
TOTAL_COLUMNS = ("size_mb",)  # a group's row: what its runs hold together
SPREAD_HELP = "mean ± std (sample std) over a group's runs"
GROUP_RUN_COLUMNS = ["run_id", "seed", "state", "best_val_acc", "test_acc", "my_drawings_acc", "duration_s", "step",
                     "tags", "note"]


def follow_group_link(filter_key: str) -> None:
    """A link to one seed group (/runs?group=ID) puts `group:ID` in the filter (the widget keyed `filter_key`) once
    per group linked to; the filter stays the user's to change afterwards."""
    group = st.query_params.get(GROUP_PARAM)
    if group and re.fullmatch(r"[0-9a-f]{8}", group) and st.session_state.get("_group_link") != group:
        st.session_state[filter_key] = f"group:{group}"
        st.session_state["_group_link"] = group


def seed_view(table: pd.DataFrame, shown: pd.DataFrame) -> Folded:
    """The switch (always drawn, so nothing after it moves; greyed out without a group to fold) and the rows it
    asks for: `shown` (the page's display copy of `table`) folded by seed group, or as it is."""
    foldable = has_groups(table)
    on = st.toggle("Group seeds", value=True, key="runs_group_seeds", disabled=not foldable,
                   help="One row per seed group (runs whose training settings differ only in seed) with the mean ± "
                        "std of its accuracies and n, its runs; select a group's row to open it below the table and "
                        "overlay its mean curve with a ±1 std band." if foldable else
                        "No two runs shown differ only in seed: nothing to group.")
    return fold_groups(shown, SPREAD_COLUMNS, totals=TOTAL_COLUMNS) if on and foldable else unfolded(shown)


def column_config(folded: bool) -> dict:
    """The folded table's columns that differ from the runs table's: accuracies are 'mean ± std' text there."""
    if not folded:
        return {}
    labels = {"best_val_acc": "best val acc %", "test_acc": "test acc %", "my_drawings_acc": "my drawings %"}
    return {"n": st.column_config.NumberColumn("n", help="runs on the row", format="%d"),
            **{name: st.column_config.TextColumn(label, help=SPREAD_HELP) for name, label in labels.items()}}


def group_runs(index: RunIndex, group: str, run_ids: tuple[str, ...], shown: pd.DataFrame,
               run_columns: dict) -> list[str]:
    """A selected group opened under the table: its runs with their seeds, in a table whose selected rows are
    overlaid one by one beside the group's band. Returns those run ids. `run_columns`: the runs table's
    column_config, so a number reads the same in both."""
    seeds = {rid: (entry.config.get("train") or {}).get("seed") for rid, entry in index.entries(list(run_ids)).items()}
    rows = shown[shown["run_id"].isin(run_ids)]
    rows = rows.assign(seed=[seeds.get(rid) for rid in rows["run_id"]]).sort_values("seed", kind="stable")
    # numbers again (the folded table beside it made these columns text): an empty cell, not "None"
    rows = rows.assign(**{c: pd.to_numeric(rows[c], errors="coerce") for c in SPREAD_COLUMNS if c in rows})
    st.markdown(f"**Seed group {group}** · {len(rows)} runs, seeds "
                f"{', '.join(str(seeds.get(rid)) for rid in rows['run_id'])}. Select runs here to overlay them one "
                "by one beside the group's band.")
    follow(f"group_runs_{group}", list(rows["run_id"]))  # a new seed sorts in: the ticks stay on their runs
    picked = st.dataframe(rows, hide_index=True, on_select="rerun", selection_mode="multi-row", placeholder="",
                          key=f"group_runs_{group}", column_order=GROUP_RUN_COLUMNS, column_config=run_columns)
    return [rows.iloc[i]["run_id"] for i in (picked.selection.rows if picked else [])]
