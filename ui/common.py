"""What every page needs: folders, the shared job registry, the current run, small widgets."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from brnn_core.data.datasets import default_data_dir
from brnn_core.devices import amp_auto_label
from brnn_core.runs.index import RunIndex
from brnn_core.runs.index_store import STORE_NAME
from brnn_core.runs.jobs import JobRegistry
from brnn_core.runs.rundir import Run, RunError, default_runs_dir, validate_run_id
from brnn_core.states import ACTIVE_STATES, State

# Streamlit's built-in Material icons and colours: they render without any emoji font.
STATE_STYLE = {State.QUEUED: ("gray", "hourglass_empty"), State.LOADING: ("gray", "hourglass_top"),
               State.RUNNING: ("green", "play_circle"), State.PAUSED: ("orange", "pause_circle"),
               State.STOPPING: ("orange", "stop_circle"), State.FINISHED: ("blue", "check_circle"),
               State.STOPPED: ("gray", "stop_circle"), State.FAILED: ("red", "error"),
               State.DIVERGED: ("red", "trending_up"), State.INTERRUPTED: ("orange", "warning")}


PICKER_RUNS = 200  # runs listed in the sidebar picker (newest first; the Runs page lists every run)


# The live panels' redraw interval while something trains: often enough to watch, rare enough that the reruns
# cost the training little (docs/decisions/008-live-refresh-interval.md).
LIVE_REFRESH_S = 3.0


def folders() -> tuple[Path, Path]:
    """Runs and data folders ($BRNN_RUNS_DIR, $BRNN_DATA_DIR; default ./runs and ./data)."""
    runs_dir = default_runs_dir()
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. a path through a regular file, or no permission: say so, don't crash
        st.error(f"The runs folder {runs_dir} cannot be used: {exc.strerror or exc}. Set BRNN_RUNS_DIR to a "
                 "writable folder and restart the dashboard.", icon=":material/error:")
        st.stop()
    return runs_dir, default_data_dir()


@st.cache_resource
def registry() -> JobRegistry:
    """One registry per server, shared by all sessions (it is thread-safe)."""
    return JobRegistry()


@st.cache_resource
def _run_index(runs_dir: str) -> RunIndex:
    return RunIndex(runs_dir, store=Path(runs_dir) / STORE_NAME)  # a new server starts with what was read


def run_index(runs_dir: Path) -> RunIndex:
    """One RunIndex per runs folder, shared by all sessions (thread-safe): each run is read again only when
    its files change, so a rerun costs little however many runs the folder holds."""
    return _run_index(str(Path(runs_dir).resolve()))


def memo(name: str, key, build):
    """`build()` once per `key` in this session: a chart whose inputs did not change is not rebuilt on a rerun
    (building a Plotly figure costs more than drawing the page around it)."""
    slot = f"_memo_{name}"
    hit = st.session_state.get(slot)
    if hit is None or hit[0] != key:
        hit = (key, build())
        st.session_state[slot] = hit
    return hit[1]


# What a run trains in, from its config.json's top-level "amp" (auto already resolved by its worker).
TRAINED_IN = {"off": "fp32", "bf16": "bf16", "fp16": "fp16"}


def precision_label(amp: str, device: str) -> str:
    """The form's words for a mixed-precision choice on `device` here: auto says what it resolves to."""
    if amp == "auto":
        return amp_auto_label(device)
    return "off (fp32)" if amp == "off" else str(amp)


def state_label(state: str | None) -> str:
    """Markdown for a run state, e.g. ':green[:material/play_circle: running]'."""
    color, icon = STATE_STYLE.get(state or "", ("gray", "help"))
    return f":{color}[:material/{icon}: {state or 'unknown'}]"


def current_run(runs_dir: Path, statuses: dict[str, dict] | None = None) -> Run | None:
    """The selected run: ?run=<id> in the URL, else this session's pick, else the newest active/any run.

    Kept in the URL so a browser refresh or a second tab shows the same run.
    """
    wanted = st.query_params.get("run") or st.session_state.get("current_run")
    if wanted:
        try:
            validate_run_id(wanted)
            run = Run(runs_dir / wanted)
            if run.exists():
                return run
        except RunError:
            pass
    states = run_index(runs_dir).statuses() if statuses is None else statuses
    ids = [i for i, s in states.items() if s.get("state") in ACTIVE_STATES] or list(states)
    return Run(runs_dir / ids[0]) if ids else None


def active_run_id(runs_dir: Path) -> str | None:
    """The newest run that is training (or about to), if any: the one a page links to (whether the machine is
    busy is the queue's to say: `registry().busy`)."""
    statuses = run_index(runs_dir).statuses()
    return next((i for i, s in statuses.items() if s.get("state") in ACTIVE_STATES), None)


def select_run(run_id: str | None) -> None:
    st.session_state["current_run"] = run_id
    if run_id:
        st.query_params["run"] = run_id
    elif "run" in st.query_params:
        del st.query_params["run"]


def run_picker(runs_dir: Path, *, label: str = "Current run", key: str = "run_picker") -> Run | None:
    """Sidebar select box of all runs; the choice becomes the current run."""
    statuses = run_index(runs_dir).statuses()
    run = current_run(runs_dir, statuses)
    asked = st.query_params.get("run")
    if asked and (run is None or run.id != asked):  # a stale link or a typo: never silently another run
        shown = asked.replace("`", "")[:80]
        flash("warning", f"There is no run `{shown}` in {runs_dir}" + (f": showing {run.id} instead." if run else "."))
    if not statuses:
        st.sidebar.caption("No runs yet.")
        return None
    ids = list(statuses)[:PICKER_RUNS]  # a sweep's hundreds of runs: the newest here, all on the Runs page
    if run and run.id in statuses and run.id not in ids:
        ids.append(run.id)
    states = {i: statuses[i].get("state") for i in ids}
    index = ids.index(run.id) if run and run.id in ids else 0

    def changed() -> None:
        select_run(st.session_state[key])

    st.session_state[key] = ids[index]
    st.sidebar.selectbox(label, ids, key=key, on_change=changed, help="Runs by start time, newest first.",
                         format_func=lambda i: f"{picker_id(i)} · {states.get(i)}")
    st.sidebar.caption(ids[index])
    if len(statuses) > len(ids):
        st.sidebar.caption(f"The newest {PICKER_RUNS} of {len(statuses):,} runs; the **Runs** page lists them all.")
    select_run(ids[index])
    return Run(runs_dir / ids[index])


def picker_id(run_id: str) -> str:
    """'20261129-214049-mnist-sample-ab6c' -> '21:40:49 ab6c': short enough for the sidebar with a state after it
    (the dataset is in the caption under the picker)."""
    parts = run_id.split("-")
    if len(parts) >= 4 and len(parts[1]) == 6 and parts[1].isdigit():
        t = parts[1]
        return f"{t[:2]}:{t[2:4]}:{t[4:]} {parts[-1]}"
    return run_id


def short_id(run_id: str) -> str:
    """'20261129-214049-mnist-sample-ab6c' -> '21:40:49 mnist-sample ab6c': what tells runs apart first."""
    parts = run_id.split("-")
    if len(parts) >= 4 and len(parts[1]) == 6 and parts[1].isdigit():
        t = parts[1]
        return f"{t[:2]}:{t[2:4]}:{t[4:]} {'-'.join(parts[2:-1])} {parts[-1]}"
    return run_id


def flash(kind: str, message: str) -> None:
    """Show a message on the next rerun (callbacks run before the page draws)."""
    st.session_state.setdefault("_flash", []).append((kind, message))


def show_flashes() -> None:
    # Always one container, empty or not: a message must not shift the elements after it, or the live
    # fragment below is redrawn at a new place while its old copy stays on screen.
    box = st.container()
    for kind, message in st.session_state.pop("_flash", []):
        getattr(box, kind)(message)
