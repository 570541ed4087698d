"""The Runs page's disk parts: each run's size on disk, the folder's total, and "Free disk space": the same prune
as `python -m brnn_core runs prune`, previewed before anything is deleted (logic: brnn_core.runs.retention)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from brnn_core.runs.index import RunIndex
from brnn_core.runs.retention import DEFAULT_PER, METRICS, PER, RunSizes, apply_prune, plan_prune, size_text
from brnn_core.states import ACTIVE_STATES
from ui.common import flash

PER_LABELS = {"group": "seed group", "sweep": "sweep", "all": "all the runs shown"}
PLAN_KEY = "prune_plan"  # session state: (request, PrunePlan) of the last preview


@st.cache_resource
def _run_sizes() -> RunSizes:
    return RunSizes()  # one per server, shared by every session (it is thread-safe)


def _active(table: pd.DataFrame) -> set[str]:
    return set(table.loc[table["state"].isin(ACTIVE_STATES), "run_id"])


def size_column(runs_dir: Path, table: pd.DataFrame) -> list[float]:
    """MB on disk of each run of `table` (a runs table), in its order: the table's size column."""
    sizes = _run_sizes().sizes(runs_dir, list(table["run_id"]), _active(table))
    return [sizes[rid] / 1e6 for rid in table["run_id"]]


def size_column_config():
    return st.column_config.NumberColumn(
        "size (MB)", format="%.1f",
        help="The run's folder on disk: checkpoints, metrics, events, report (a seed group's row: its runs' mean).")


def _on_preview(runs_dir: Path, index: RunIndex, run_ids: list[str], request: tuple) -> None:
    keep, metric, per = request[:3]
    try:
        plan = plan_prune(runs_dir, run_ids, keep, metric, per, index=index)
    except ValueError as exc:  # PruneError: the message says what to change
        st.session_state.pop(PLAN_KEY, None)
        flash("error", f"Nothing to preview: {exc}")
        return
    st.session_state[PLAN_KEY] = (request, plan)


def _on_prune() -> None:
    _, plan = st.session_state.pop(PLAN_KEY)
    st.session_state["prune_sure"] = False  # the next preview asks again
    done = apply_prune(plan)
    skipped = len(plan.items) - len(done)
    flash("success", f"Freed {size_text(sum(b for _, b in done))}: the checkpoints of {len(done)} run(s) were "
                     "deleted; their records are kept."
          + (f" {skipped} run(s) were resumed meanwhile and left as they are." if skipped else ""))


def free_disk_space(runs_dir: Path, index: RunIndex, table: pd.DataFrame) -> None:
    """The folder's total and the prune of the runs in `table` (the filter's), with a preview and a confirmation."""
    everything = index.table()
    total = _run_sizes().total(runs_dir, list(everything["run_id"]), _active(everything))
    with st.expander(f"Free disk space · the runs folder holds {size_text(total)} in {len(everything):,} runs",
                     icon=":material/delete_sweep:", key="free_disk"):
        st.caption("Deletes the checkpoints (best.pt, last.pt and the files beside them) of the ended runs shown "
                   "above that are not among the best of their seed group, sweep or of all of them. Configs, "
                   "metrics, notes and reports stay; an active or queued run is never touched. The same as "
                   "`python -m brnn_core runs prune`.")
        c1, c2, c3 = st.columns(3)
        keep = c1.number_input("Keep the best", min_value=1, value=1, step=1, key="prune_keep")
        metric = c2.selectbox("Ranked by", list(METRICS), key="prune_by",
                              help="Validation metrics only: choosing by the test set would flatter its score.")
        per = c3.selectbox("Within each", PER, index=PER.index(DEFAULT_PER), key="prune_per",
                           format_func=PER_LABELS.get)
        run_ids = list(table["run_id"])
        request = (int(keep), metric, per, tuple(run_ids))
        st.button(f"Preview ({len(run_ids):,} runs shown)", key="prune_preview", on_click=_on_preview,
                  args=(runs_dir, index, run_ids, request))
        preview = st.container()  # always there: what follows it keeps its place
        saved = st.session_state.get(PLAN_KEY)
        with preview:
            if saved is None or saved[0] != request:
                st.caption("Press **Preview** to see what would go and how much it frees; nothing is deleted yet.")
                return
            _preview(saved[1])


def _preview(plan) -> None:
    if plan.untouched:
        st.caption("Left as they are: " + ", ".join(f"{rid} ({why})" for rid, why in plan.untouched.items()))
    if not plan.items:
        st.info(f"Nothing to free: every ended run shown is among the best {plan.keep_best} per "
                f"{PER_LABELS[plan.per]} by {plan.metric}, or has no checkpoint left.")
        return
    st.dataframe(pd.DataFrame([{"run_id": i.run_id, "frees (MB)": i.frees / 1e6, "files": ", ".join(i.files),
                                plan.metric: i.value, "rank": i.rank, "within": i.unit} for i in plan.items]),
                 hide_index=True, key="prune_table",
                 column_config={"frees (MB)": st.column_config.NumberColumn(format="%.2f")})
    sure = st.checkbox(f"Yes, delete the checkpoints of these {len(plan.items)} runs ({size_text(plan.total)})",
                       key="prune_sure")
    st.button(f"Free {size_text(plan.total)}", type="primary", key="prune_go", disabled=not sure,
              on_click=_on_prune)
