"""Sweep page: search hyperparameters with Ray Tune, watch every trial live, open the best in Predict."""

from __future__ import annotations

from ui.navigation import ensure_navigation

ensure_navigation()  # first, before PyTorch loads: see ui/navigation.py

from pathlib import Path

import streamlit as st
import torch

from brnn_core.config import AUTO_HEAD, ConfigError, TrainConfig
from brnn_core.data.datasets import DATASETS
from brnn_core.fileio import read_json
from brnn_core.runs.rundir import Run, RunError
from brnn_core.states import ACTIVE_STATES, State
from brnn_core.sweep import charts as sweep_charts
from brnn_core.sweep.launch import continue_sweep, resumable, start_sweep
from brnn_core.sweep.plan import (
    CONNECT_TIMEOUT_S,
    DEFAULT_GPU_SHARE,
    DEFAULT_KEEP_BEST,
    SCHEDULERS,
    SEARCH_ALGS,
    SweepRequest,
    describe,
    plan_sweep,
)
from brnn_core.sweep.records import (
    BEST_CONFIG,
    METRICS,
    RESUMABLE,
    Sweep,
    list_sweeps,
    metric_curves,
    sweeps_dir,
    trial_number,
    trials_table,
)
from brnn_core.sweep.space import SEARCHABLE, SPEC_HELP, SUGGESTED_SPECS, SweepError, parse_spec
from ui.common import LIVE_REFRESH_S, flash, folders, memo, picker_id, registry, run_index, show_flashes, state_label
from ui.state import fill_train_form, pick_checkpoint, train_form

runs_dir, data_dir = folders()
st.title("Sweep hyperparameters")
st.caption("Ray Tune trains many settings side by side, stops bad ones early (ASHA) or lets good ones adapt (PBT). "
           "Every trial is an ordinary run: the Train page shows it live, with Pause, Resume and Stop.")
show_flashes()

SWEEP_EPOCHS = 2  # a trial's epochs on the page unless the Train form names a number
BASE_FIELDS = (("epochs", "Epochs"), ("hidden_size", "Hidden size"), ("num_layers", "Recurrent layers"),
               ("batch_size", "Batch size"), ("lr", "Learning rate"))


PLAN_CACHE_S = 4 * CONNECT_TIMEOUT_S  # how long a checked plan is reused (a silent address costs the timeout)


@st.cache_data(ttl=PLAN_CACHE_S, show_spinner=False)
def plan_check(request: SweepRequest, runs_dir: str, data_dir: str) -> tuple[str | None, str | None]:
    """(what will run, or why it cannot), kept PLAN_CACHE_S: with an address, planning asks that host over TCP
    (up to CONNECT_TIMEOUT_S when nothing answers), which must not stall every widget change while the address
    is typed."""
    try:
        return describe(plan_sweep(request, Path(runs_dir), Path(data_dir)), with_id=False), None
    except (SweepError, ValueError) as exc:
        return None, str(exc)


def default(key: str, value) -> None:
    st.session_state.setdefault(key, value)


# ------------------------------------------------------------------ which sweep
def on_pick() -> None:
    st.session_state["sweep_id"] = st.session_state["sweep_pick"]
    st.query_params["sweep"] = st.session_state["sweep_pick"]


def pick_sweep() -> str | None:
    """?sweep=<id> in the URL (a reload keeps the view), else this session's pick, else the newest sweep."""
    sweeps = {s.id: s.info() for s in list_sweeps(runs_dir)}
    wanted = st.query_params.get("sweep") or st.session_state.get("sweep_id")
    starting = [wanted] if wanted and wanted not in sweeps and registry().process(wanted) else []
    options = starting + list(sweeps)
    if not options:
        return None
    current = wanted if wanted in options else options[0]
    st.session_state["sweep_pick"] = current
    st.sidebar.selectbox("Sweep", options, key="sweep_pick", on_change=on_pick,
                         help="Sweeps by start time, newest first.",
                         format_func=lambda i: f"{picker_id(i)} · {sweeps.get(i, {}).get('state', 'starting')}")
    st.sidebar.caption(current)  # the whole id (with the sweep's name) that the short label leaves out
    st.session_state["sweep_id"] = current
    st.query_params["sweep"] = current
    return current


current = pick_sweep()

# ------------------------------------------------------------------ the form
left, right = st.columns([1, 2.4], gap="large")
errors: list[str] = []
with left:
    st.subheader("New sweep")
    base_defaults = train_form(data_dir)  # the Train page's values (its defaults when it was not visited)
    # many trials side by side: short ones unless the Train page asked for a number (0 = its dataset's auto)
    base_defaults = base_defaults | {"epochs": base_defaults["epochs"] or SWEEP_EPOCHS}
    with st.expander("Base settings (every trial starts from these)", expanded=False):
        default("sw_dataset", base_defaults["dataset"])
        st.selectbox("Dataset", list(DATASETS), key="sw_dataset", format_func=lambda n: DATASETS[n].title)
        for name, label in BASE_FIELDS:
            default(f"sw_{name}", base_defaults[name])
            st.number_input(label, key=f"sw_{name}", format="%.5f" if name == "lr" else None,
                            step=0.001 if name == "lr" else 1)
    default("sw_fields", ["lr"])
    fields = st.multiselect("Fields to search", SEARCHABLE, key="sw_fields")
    base = {"dataset": st.session_state["sw_dataset"], **{n: st.session_state[f"sw_{n}"] for n, _ in BASE_FIELDS}}
    try:
        # the head is not set here: auto, so a searched direction gets its own (as plan_sweep keeps it)
        base_values = TrainConfig.from_dict(base, check_device=False).to_dict() | {"head": AUTO_HEAD}
    except ConfigError as exc:
        st.error(f"Base settings: {exc}", icon=":material/error:")
        base_values, errors = TrainConfig().to_dict(), ["base"]
    search = []
    for name in fields:
        default(f"sw_spec_{name}", SUGGESTED_SPECS.get(name, "choice:"))
        text = st.text_input(f"{name}", key=f"sw_spec_{name}", help=SPEC_HELP)
        try:
            parse_spec(name, text, base_values)
            search.append(f"{name}={text}")
        except SweepError as exc:
            st.error(str(exc).removeprefix("--search "), icon=":material/error:")
            errors.append(name)
    first_col, second_col = st.columns(2)
    default("sw_trials", 4)
    trials = first_col.number_input("Trials", min_value=1, step=1, key="sw_trials", help="grid values multiply it")
    scheduler = second_col.selectbox("Scheduler", SCHEDULERS, key="sw_scheduler",
                             help="fifo: all train to the end · asha: stop bad ones early · pbt: copy good ones")
    metric = first_col.selectbox("Metric", list(METRICS), key="sw_metric")
    search_alg = first_col.selectbox("Search", SEARCH_ALGS, key="sw_search_alg",
                              help="random: independent samples · tpe: Optuna's TPE picks each next trial from the "
                                   "results so far (fifo or asha; no grid specs)")
    interval = second_col.number_input("PBT: epochs between exploits", min_value=1, value=1, step=1, key="sw_interval",
                               disabled=scheduler != "pbt")
    grace = first_col.number_input("ASHA: grace period (epochs)", min_value=1, value=1, step=1, key="sw_grace",
                            disabled=scheduler != "asha", help="epochs every trial trains before ASHA may stop it")
    reduction = second_col.number_input("ASHA: reduction factor", min_value=2, value=2, step=1, key="sw_reduction",
                                disabled=scheduler != "asha", help="only the best 1/N of the trials at each rung go on")
    budget = st.number_input("Time budget (minutes, 0 = none)", min_value=0.0, value=0.0, step=5.0, key="sw_budget",
                             help="then the trials still training save last.pt and stop; **Continue sweep** goes on")
    with st.expander("Resources"):
        default("sw_gpus", DEFAULT_GPU_SHARE if torch.cuda.is_available() else 0.0)
        concurrency = st.number_input("Trials at once (0 = what this machine holds)", min_value=0, value=0, step=1,
                                      key="sw_concurrency")
        cpus = st.number_input("CPUs (torch threads) per trial", min_value=0.5, value=1.0, step=0.5, key="sw_cpus")
        gpus = st.number_input("GPU share per trial", min_value=0.0, step=DEFAULT_GPU_SHARE, key="sw_gpus",
                               help=f"{DEFAULT_GPU_SHARE:g} puts {round(1 / DEFAULT_GPU_SHARE)} trials on one GPU")
        address = st.text_input("Ray cluster address (empty: this machine)", key="sw_address",
                                help="HOST:PORT of a head started with `ray start --head --port=PORT`")
        name = st.text_input("Name (optional)", key="sw_name")
        keep_best = st.number_input("Ended trials keeping last.pt (the best k)", min_value=0,
                                    value=DEFAULT_KEEP_BEST, step=1, key="sw_keep_best",
                                    help="The others keep best.pt only (2 MB instead of 9 MB): "
                                    "they still open in Predict and branch from best.pt.")
        keep_all = st.checkbox("Keep every trial's last.pt", key="sw_keep_all")
    request = SweepRequest(search=search, sets=[f"{k}={v}" for k, v in base.items()], trials=int(trials),
                           scheduler=scheduler, metric=metric,
                           perturbation_interval=int(interval) if scheduler == "pbt" else None,
                           concurrency=int(concurrency) or None, cpus_per_trial=float(cpus),
                           gpus_per_trial=float(gpus), address=address.strip() or None, name=name.strip() or None,
                           keep_best=int(keep_best), keep_all=bool(keep_all), search_alg=search_alg,
                           grace_period=int(grace) if scheduler == "asha" else 1,
                           reduction_factor=int(reduction) if scheduler == "asha" else 2,
                           time_budget_min=float(budget) or None)
    plan_note = None
    if not errors:
        plan_note, problem = plan_check(request, str(runs_dir), str(data_dir))
        if problem:
            st.error(problem, icon=":material/error:")
            errors.append("plan")
    if plan_note:
        st.caption(plan_note)

    def on_start() -> None:
        try:
            sweep_id = start_sweep(registry(), runs_dir, data_dir, request)
        except (SweepError, RunError, ValueError, OSError) as exc:
            flash("error", f"Not started: {exc}")
            return
        st.session_state["sweep_id"] = sweep_id
        st.session_state.pop("sweep_pick", None)
        st.query_params["sweep"] = sweep_id
        flash("success", f"Started sweep {sweep_id}.")

    st.button("Start sweep", type="primary", on_click=on_start, disabled=bool(errors), use_container_width=True)


# ------------------------------------------------------------------ the sweep
def starting_panel(sweep: Sweep) -> None:
    proc = registry().process(sweep.id)
    log = sweep.log_path.read_text(errors="replace")[-3000:] if sweep.log_path.is_file() else ""
    if proc is not None and proc.poll() is not None:
        st.error(f"The sweep's driver ended (exit {proc.returncode}) before it started any trial:")
        st.code(log or "(no output)", language=None)
        return
    last = next((line for line in reversed(log.splitlines()) if line.strip()), "")
    st.info(f"Sweep **{sweep.id}** {last}" if last.startswith("queued: ")  # the driver waits for its turn
            else f"Starting Ray for sweep **{sweep.id}**…", icon=":material/hourglass_top:")
    if log:
        st.code(log, language=None)


def text_width(longest: str) -> int:
    """Pixels a table column needs for this text at the dataframe's font (and the cell's padding)."""
    return round(7.5 * len(longest)) + 24


def live_panel(sweep_path: str, seen_state: str | None) -> None:
    """Re-reads the sweep and its trials on a timer; a state change reruns the page (its buttons)."""
    sweep = Sweep(sweep_path)
    if not sweep.exists():
        if seen_state is not None:
            st.rerun()
        starting_panel(sweep)
        return
    info = sweep.info()
    if info.get("state") != seen_state:
        st.rerun()
    metric = info.get("metric", "val_loss")
    index = run_index(sweep.runs_dir)  # shared with the Runs page: a trial is re-read only when its files change
    table = trials_table(sweep, index)
    states = table["state"].map(lambda s: State.RUNNING if s in ACTIVE_STATES else s).value_counts()
    tally = " · ".join(f"{n} {s}" for s, n in sorted(states.items()))
    st.caption(f"{len(table)} of {info.get('plan', {}).get('trials', '?')} trials started · {tally or 'none yet'}")
    # Widths of their own: a table first drawn empty (the sweep just started) keeps the widths its headers gave,
    # which cut every run id that arrives later. A missing value (a trial before its first epoch) stays blank.
    st.dataframe(table, hide_index=True, key="sweep_table", placeholder="", column_config={
        "run_id": st.column_config.TextColumn("run", width=text_width(f"{sweep.id}-t000")),
        "state": st.column_config.TextColumn("state", width=text_width("interrupted")),
        "lr": st.column_config.NumberColumn("lr", format="%.3g"),
        f"best {metric}": st.column_config.NumberColumn(format="%.4f"),
        f"last {metric}": st.column_config.NumberColumn(format="%.4f"),
        "note": st.column_config.TextColumn("why it ended", width="large")})
    if (table["last.pt"] == "pruned").any():
        st.caption("last.pt **pruned**: the trial keeps only best.pt (to save disk), so it can be opened in Predict "
                   "but not resumed.")
    specs = sweep.specs()
    keys = [s.key for s in specs]
    curves = metric_curves(sweep, index)
    # the figures are rebuilt only when what they show changed: the table's values, a curve's length
    key = (sweep.id, metric, table.to_json(), tuple((rid, len(c)) for rid, c in curves.items()))
    parcoords, lines = memo("sweep_figures", key, lambda: (
        sweep_charts.parcoords_figure(table, keys, metric, revision=sweep.id,
                                      log_keys=tuple(s.key for s in specs if s.kind == "loguniform")),
        sweep_charts.curves_figure(curves, metric, revision=sweep.id)))
    st.plotly_chart(parcoords, key="sweep_parcoords", on_select="ignore")
    st.plotly_chart(lines, key="sweep_curves", on_select="ignore")


def on_stop(sweep_path: str) -> None:
    Sweep(sweep_path).request_stop("dashboard")
    flash("info", "Stopping the sweep: every trial saves last.pt, then ends…")


def on_continue(sweep_path: str) -> None:
    try:
        continue_sweep(registry(), Sweep(sweep_path))
    except (SweepError, RunError, OSError) as exc:
        flash("error", f"Not continued: {exc}")
        return
    flash("info", "Continuing the sweep: stopped trials go on from their last.pt, finished ones stay as they are…")


def open_in_predict(path: str) -> None:
    pick_checkpoint(path)
    st.session_state["_to_predict"] = True  # switch_page is not allowed in a callback: the script does it


def train_with(config_path: str) -> None:
    """Fill the Train page's form with the best trial's settings (best-config.json) and go there."""
    values = read_json(Path(config_path))
    fill_train_form(values if isinstance(values, dict) else {}, data_dir,
                    source=f"sweep {Path(config_path).parent.name}'s best trial")
    st.session_state["_to_train"] = True


with right:
    if current is None:
        st.info("No sweep yet: pick the fields to search on the left and press **Start sweep**, or start one from "
                "a terminal (`python -m brnn_core sweep --search lr=loguniform:1e-4:1e-1`); it shows up here.")
        st.stop()
    sweep = Sweep(sweeps_dir(runs_dir) / current)
    info = sweep.info() if sweep.exists() else {}
    state = info.get("state")
    st.markdown(f"### {state_label(state) if state else ':gray[starting]'} · {info.get('name', current)}")
    if info:
        st.caption(f"`{sweep.id}` · {info.get('scheduler')} on {info.get('metric')} · Ray: {info.get('address')} · "
                   f"{info.get('message', '')}")
    best = info.get("best")
    best_pt = Run(runs_dir / best["run_id"]).best_ckpt if best else None
    best_config = sweep.path / BEST_CONFIG
    driver = registry().process(sweep.id)  # a driver this server started and that still runs (e.g. continuing)
    b1, b2, b3 = st.columns(3)
    if state in RESUMABLE and sweep.exists():
        b1.button("Continue sweep", disabled=driver is not None or not resumable(sweep), use_container_width=True,
                  on_click=on_continue, args=(str(sweep.path),),
                  help=f"`python -m brnn_core sweep --resume {sweep.id}`: stopped and interrupted trials go on from "
                       "their last.pt, trials not started yet start, finished ones stay as they are.")
    else:
        b1.button("Stop sweep", disabled=state != State.RUNNING, use_container_width=True, on_click=on_stop,
                  args=(str(sweep.path),), help="Every trial saves its last.pt and ends; no new trial starts.")
    b2.button("Open best in Predict", disabled=not (best_pt and best_pt.is_file()), use_container_width=True,
              on_click=open_in_predict, args=(str(best_pt),), help="The best trial's best.pt on the Predict page.")
    b3.button("Train with these settings", disabled=not best_config.is_file(), use_container_width=True,
              on_click=train_with, args=(str(best_config),),
              help=f"The Train page, filled in with the best trial's settings ({BEST_CONFIG}; also "
                   f"`python -m brnn_core train --config {best_config}`).")
    if st.session_state.pop("_to_predict", False):
        st.switch_page("pages/predict.py")
    if st.session_state.pop("_to_train", False):
        st.switch_page("pages/train.py")
    if best:
        st.markdown(f"**Best:** trial {trial_number(best['run_id'])} · {best['metric']} {best['value']:.4f} at epoch "
                    f"{best['epoch']:g} (`{best['run_id']}`)")
    if driver is not None and state in RESUMABLE:
        st.info("Continuing: Ray starts, then the trials go on…", icon=":material/hourglass_top:")
    live = state in (None, State.RUNNING) or driver is not None
    st.fragment(run_every=LIVE_REFRESH_S if live else None)(live_panel)(str(sweep.path), state)
