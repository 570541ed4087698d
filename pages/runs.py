"""Runs page: every run in a table, overlaid curves, and one run's test report and files."""

from __future__ import annotations

from ui.navigation import ensure_navigation

ensure_navigation()  # first, before PyTorch loads: see ui/navigation.py

import io
from pathlib import Path

import numpy as np
import streamlit as st
from PIL import Image

from brnn_core import charts
from brnn_core.data.datasets import DatasetError
from brnn_core.data.drawings import MIN_FOR_ACCURACY
from brnn_core.data.loading import load_dataset
from brnn_core.runs.branch import branch_points, with_parents
from brnn_core.runs.export import long_table
from brnn_core.runs.filter import FilterError, filter_table
from brnn_core.runs.notes import MAX_NOTE, read_notes, write_notes
from brnn_core.runs.rundir import Run, RunError, delete_run
from brnn_core.states import ACTIVE_STATES
from brnn_core.text import plural
from brnn_core.training.drawing_mix import mix_line, summary_line
from brnn_core.training.reports import THUMBNAILS_KEPT, compute_report, read_report, read_thumbnails
from ui import drawings as my
from ui import groups, interop
from ui.branch import branch_form
from ui.common import LIVE_REFRESH_S, flash, folders, memo, run_index, select_run, show_flashes, state_label
from ui.retention import free_disk_space, size_column, size_column_config
from ui.selection import follow

runs_dir, data_dir = folders()
st.title("Runs")
show_flashes()
index = run_index(runs_dir)  # each run read once, again only when its files change
table = index.table()
if table.empty:
    st.info("No runs yet. Start one on the **Train** page.")
    st.stop()

groups.follow_group_link("runs_filter")  # the Compare page's link to an entry's seed group
query = st.text_input("Filter", key="runs_filter", placeholder="val_accuracy > 97 and lr <= 0.01 and state:finished",
                      help="Comparisons on the table's columns (val_accuracy, test_accuracy, lr, hidden, epochs, "
                           "dataset, cell == gru, bidirectional == false, …), state:NAME, tag:NAME, group:ID, "
                           "joined with and / or / not and parentheses. Accuracies as the table shows them, in "
                           "percent (val_accuracy > 97), or as a fraction (0.97): a number above 1 is a percent. "
                           "Read as a filter, never run as code; the same as "
                           "`python -m brnn_core runs list --filter`.")
try:
    table = filter_table(table, query)
except FilterError as exc:
    st.error(f"The filter does not parse, so every run is listed:\n```\n{exc}\n```", icon=":material/error:")
if query and table.empty:
    st.info("No run matches the filter.")
    st.stop()
shown = table.assign(best_val_acc=table["best_val_acc"] * 100, test_acc=table["test_acc"] * 100,
                     bidirectional=table["bidirectional"].map({True: "two-way", False: "one-way"}))
for name in shown.select_dtypes(exclude=["number", "bool"]).columns:  # text columns: an empty cell, not "None"
    shown[name] = shown[name].where(shown[name].notna(), "")
stored = my.scores([Run(runs_dir / rid).best_ckpt for rid in table["run_id"]], data_dir)  # read, never computed
scores = list(stored.values())
shown["my_drawings_acc"] = [100 * s.accuracy if s else float("nan") for s in scores]  # a number column
shown["size_mb"] = size_column(runs_dir, table)
view = groups.seed_view(table, shown)  # one row per seed group, or per run
folded = len(view.members) < len(shown)
run_columns = {
    "best_val_acc": st.column_config.NumberColumn("best val acc %", format="%.2f"),
    "test_acc": st.column_config.NumberColumn("test acc %", format="%.2f"),
    "my_drawings_acc": st.column_config.NumberColumn(
        "my drawings %", format="%.0f",
        help=f"best.pt on your saved drawings (Predict page), shown from "
             f"{MIN_FOR_ACCURACY} drawings on"),
    "duration_s": st.column_config.NumberColumn("duration (s)", format="%.0f"),
    "size_mb": size_column_config(),
    "lr": st.column_config.NumberColumn("lr", format="%g"),
    "bidirectional": st.column_config.TextColumn("direction", help="two-way: rows read top-down and bottom-up; "
                                                 "one-way: top-down only (filter: bidirectional == false)"),
}
table_key = "runs_groups_table" if folded else "runs_table"
# the ticks stay on their runs (and groups) when new rows push them down; ticked runs stay ticked in their groups'
# rows when seeds are grouped (a ticked group does not tick its thousand runs one by one when they are not)
follow(table_key, view.identities(), view.answers() if folded else None, share="runs")
picked = st.dataframe(view.table, hide_index=True, on_select="rerun", selection_mode="multi-row", key=table_key,
                      placeholder="",  # a missing value (no test report, no drawings score) is a blank cell
                      column_order=["run_id", *(["n"] if folded else []), "state", "dataset", "best_val_acc",
                                    "test_acc", "my_drawings_acc", "duration_s", "size_mb", "step", "epochs", "cell",
                                    "bidirectional", "hidden", "layers", "head", "batch", "lr", "optimizer", "device",
                                    "parent", "group", "tags", "note", "problem"],
                      column_config={**run_columns, **groups.column_config(folded)})
group_slot = st.container()  # a selected group's runs: always there, so nothing after it moves
export_cols = st.columns([1, 1, 3])
if export_cols[0].button(f"Export {plural(len(table), 'run')}", icon=":material/download:",
                         help="Every metrics row of the runs shown (the filter's), with run id, seed group, tags and "
                              "training settings as columns; the same as `python -m brnn_core runs export`."):
    st.session_state["runs_export"] = long_table(runs_dir, table).to_csv(index=False).encode()
if st.session_state.get("runs_export"):
    export_cols[1].download_button("Download CSV", st.session_state["runs_export"], file_name="runs-metrics.csv",
                                   mime="text/csv", on_click="ignore")
free_disk_space(runs_dir, index, table)
with_data = set(table[table["step"].fillna(0) > 0]["run_id"])
rows = picked.selection.rows if picked else []
selected, picked_groups = view.picked(rows, with_data)
with group_slot:  # the groups the user selected open here (those overlaid unasked stay closed)
    for gid, members in (picked_groups if rows else {}).items():
        selected += [rid for rid in groups.group_runs(index, gid, members, shown, run_columns) if rid not in selected]
shown_ids = with_parents(runs_dir, selected)  # a branch is drawn with the run it left, on one step axis
parents = [rid for rid in shown_ids if rid not in selected]
showing = [f"group {gid} ({len(members)} runs, mean ± std)" for gid, members in picked_groups.items()] + selected
st.caption("Select rows (the boxes on the left) to overlay their curves; "
           f"showing {', '.join(showing) if showing else 'nothing yet'}"
           + (f", with the parent runs {', '.join(parents)}." if parents else "."))

o1, o2, o3 = st.columns(3)
smoothing = o1.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="cmp_smooth")
log_y = o2.toggle("Log scale", key="cmp_log")
curves = {rid: index.metrics(rid) for rid in shown_ids}  # only the overlaid runs' whole metrics
# a group's band: built once per version of its runs' files (a thousand seeds cost a stat each on a rerun)
bands = {what: {f"group {gid}": index.band(list(members), what, smoothing if what == "train" else 0.0)
                for gid, members in picked_groups.items()} for what in ("train", "val")}
points = branch_points(runs_dir, shown_ids)
curves_key = (tuple((rid, id(df), len(df)) for rid, df in curves.items()), repr(points))  # re-read: new frame
train_col, val_col = st.columns(2)
train_col.plotly_chart(memo("cmp_train", (curves_key, tuple(bands["train"].items()), smoothing, log_y),
                            lambda: charts.compare_figure(curves, smoothing=smoothing, what="train", log_y=log_y,
                                                          branches=points, groups=bands["train"])),
                       key="cmp_train", on_select="ignore")
val_col.plotly_chart(memo("cmp_val", (curves_key, tuple(bands["val"].items()), log_y), lambda: charts.compare_figure(
    curves, what="val", log_y=log_y, branches=points, groups=bands["val"])), key="cmp_val", on_select="ignore")
interop.compare_two(runs_dir, selected if rows else [])  # two runs selected: config and environment side by side

st.divider()
ids = list(table["run_id"])
wanted = st.session_state.get("inspect")  # e.g. a branch just created by the form below
overlaid = selected + [rid for members in picked_groups.values() for rid in members]
default = wanted if wanted in ids else (overlaid[0] if overlaid else ids[0])
run_id = st.selectbox("Inspect one run", ids, index=ids.index(default), key="inspect")
run = Run(runs_dir / run_id)
if not run.exists():  # an entry that is no run folder to read (a symlink loop, a link to nothing): its problem
    problem = table.set_index("run_id")["problem"].get(run_id)
    st.error(f"{run_id} cannot be inspected: {problem if isinstance(problem, str) else 'it has no config.json'}.",
             icon=":material/error:")
    st.stop()
status = run.status()
watching = status.get("state") in ACTIVE_STATES


def inspected_state(run_path: str, seen_state: str | None) -> None:
    """The inspected run's state, re-read on a timer while it can change; a change redraws the whole page
    (its report, files and buttons)."""
    now = Run(run_path).status()
    if now.get("state") != seen_state:
        st.rerun()
    st.markdown(f"**{state_label(now.get('state'))}** · {now.get('message', '')}")


st.fragment(run_every=LIVE_REFRESH_S if watching else None)(inspected_state)(str(run.path), status.get("state"))


def on_save_notes(run_path: str, tags_key: str, note_key: str) -> None:
    try:
        write_notes(Path(run_path), tags=st.session_state[tags_key].split(","), note=st.session_state[note_key])
    except (ValueError, OSError) as exc:
        flash("error", f"Not saved: {exc}")
        return
    flash("success", "Tags and note saved.")


with st.expander("Tags and note", icon=":material/sell:"):
    try:
        notes = read_notes(run.path)
    except OSError as exc:  # saving would replace what could not be read: say so instead of offering it
        st.caption(f"notes.json cannot be read ({exc.strerror or exc}), so its tags and note are not shown.")
        notes = None
    if notes is not None:
        tags_key, note_key = f"tags_{run.id}", f"note_{run.id}"
        st.text_input("Tags (comma-separated)", value=", ".join(notes.tags), key=tags_key,
                      help="Short words (letters, digits, . _ -); the filter above finds them with tag:NAME. The "
                           "same as `python -m brnn_core runs tag RUN --add NAME`.")
        st.text_area("Note", value=notes.note, key=note_key, height=100, max_chars=MAX_NOTE,
                     help="Free text, kept in the run folder (notes.json).")
        st.button("Save tags and note", on_click=on_save_notes, args=(str(run.path), tags_key, note_key))
branch_form(run, runs_dir, data_dir, key="runs_branch")


@st.cache_data(max_entries=4, show_spinner="Loading test images…")
def test_images(dataset: str) -> np.ndarray:
    return load_dataset(dataset, data_dir, download=False).test_x.numpy()


@st.cache_data(max_entries=16, show_spinner=False)
def thumbnails(run_dir: str, report_key: tuple, dataset: str, indices: tuple[int, ...]) -> list[bytes]:
    """PNGs of these test images, encoded once (st.image would encode each array again on every rerun). From
    the pixels kept with the report; a run from before that loads its dataset's test split."""
    kept = read_thumbnails(Run(run_dir), len(indices))
    images = kept if kept is not None else test_images(dataset)[list(indices)]
    out = []
    for image in images:
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


# the precision a report was evaluated in: the one its run trained in where this machine runs it natively
PRECISION_NAMES = {"off": "fp32", "bf16": "bf16 (as it trained)", "fp16": "fp16 (as it trained)"}

tab_report, tab_events, tab_env, tab_files = st.tabs(["Test report", "Event log", "Environment", "Files"])
with tab_report:
    report = read_report(run)
    if report is None:
        has_ckpt = run.best_ckpt.is_file() or run.last_ckpt.is_file()
        st.info("No test report yet: it is written when a run finishes." +
                (" You can compute it now from the saved checkpoint." if has_ckpt else ""))
        if has_ckpt and st.button("Compute the test report"):
            try:
                with st.spinner("Evaluating on the test set…"):
                    compute_report(run, data_dir)
                st.rerun()
            except (DatasetError, ValueError) as exc:
                st.error(f"Cannot compute the report: {exc}")
    else:
        classes = report["classes"]
        st.metric("Test accuracy", f"{100 * report['accuracy']:.2f}%",
                  help=f"{report.get('size', '?')} test images, {report.get('checkpoint', 'best.pt')}, evaluated in "
                       f"{PRECISION_NAMES.get(report.get('amp', 'off'), report.get('amp'))}")
        if report.get("my_drawings"):
            mine = report["my_drawings"]
            st.markdown(f"**Your drawings**: {mix_line(mine)}; {summary_line(mine)}")
        r1, r2 = st.columns(2)
        report_key = (run.id, report.get("checkpoint"), report.get("loss"), report.get("size"))
        r1.plotly_chart(memo("confusion", report_key, lambda: charts.confusion_figure(report["confusion_matrix"],
                                                                                      classes)),
                        key="confusion", on_select="ignore")
        r2.plotly_chart(memo("per_class", report_key, lambda: charts.per_class_figure(report["per_class_accuracy"],
                                                                                      classes)),
                        key="per_class", on_select="ignore")
        wrong = report["misclassified"]
        st.markdown(f"**Misclassified test images** ({min(len(wrong), THUMBNAILS_KEPT)} of {len(wrong)} shown, "
                    "most confident mistakes first)")
        try:
            first_wrong = wrong[:THUMBNAILS_KEPT]
            indices = tuple(item["index"] for item in first_wrong)
            pngs = thumbnails(str(run.path), report_key, report["dataset"], indices)
            cols = st.columns(8)
            for k, (item, png) in enumerate(zip(first_wrong, pngs, strict=True)):
                caption = f"true {classes[item['true']]} → {classes[item['pred']]} ({100 * item['confidence']:.0f}%)"
                cols[k % 8].image(png, width=72, output_format="PNG", caption=caption)
        except (DatasetError, IndexError) as exc:
            st.warning(f"Test images unavailable: {exc}")

def event_table(run_path: str) -> None:
    events = [e for e in Run(run_path).events() if e.get("kind") != "traceback"]
    if events:
        st.dataframe([{k: e.get(k) for k in ("time", "step", "kind", "message")} for e in events],
                     hide_index=True, key="events_table")
    else:
        st.caption("No events yet." if watching else "No events.")


with tab_events:
    st.fragment(run_every=LIVE_REFRESH_S if watching else None)(event_table)(str(run.path))

with tab_env:
    interop.environment(run)


def file_bytes(path: Path) -> bytes | None:
    """The file's bytes to download, None when there is none to read (a folder in its place, an unreadable file:
    the table's problem column says so)."""
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


with tab_files:
    if (metrics_csv := file_bytes(run.metrics_path)) is not None:
        st.download_button("Download metrics.csv", metrics_csv, file_name=f"{run.id}-metrics.csv", mime="text/csv")
    if run.best_ckpt.is_file():
        st.download_button("Download best checkpoint", run.best_ckpt.read_bytes(), file_name=f"{run.id}-best.pt",
                           mime="application/octet-stream")
    interop.export_download(run)
    st.code(str(run.path.resolve()), language=None)
    if st.button("Open on the Train page"):
        select_run(run.id)
        st.switch_page("pages/train.py")

    def on_delete(rid: str) -> None:
        try:
            delete_run(runs_dir, rid)
            flash("success", f"Deleted run {rid}.")
        except (RunError, OSError) as exc:
            flash("error", f"Not deleted: {exc}")

    with st.expander("Delete this run"):
        if status.get("state") in ACTIVE_STATES:
            st.caption("Stop the run before deleting it.")
        sure = st.checkbox(f"Yes, delete {run.id} and its checkpoints", key=f"sure_{run.id}")
        st.button("Delete run", type="primary", disabled=not sure or status.get("state") in ACTIVE_STATES,
                  on_click=on_delete, args=(run.id,))
