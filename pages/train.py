"""Train page: hyperparameters, Start/Pause/Resume/Stop, live controls and live charts."""

from __future__ import annotations

from ui.navigation import ensure_navigation

ensure_navigation()  # first, before PyTorch loads: see ui/navigation.py

import streamlit as st
import torch

from brnn_core import charts
from brnn_core.config import (
    AMP_MODES,
    AUGMENT_LEVELS,
    CELL_NAMES,
    HEADS,
    LIVE_FIELDS,
    OPTIMIZERS,
    ConfigError,
    TrainConfig,
    architecture,
    epochs_auto_label,
    resolve_augment,
    resolve_head,
)
from brnn_core.data.datasets import DATASETS, availability, default_dataset
from brnn_core.devices import device_choices
from brnn_core.model import CELL_TITLES, INPUT_SCALES, ModelConfig, network_name
from brnn_core.runs.progress import Pace, lr_plan, progress_text, queue_place
from brnn_core.runs.protocol import STOP, event_text, live_problems, live_settings, outcomes, send_live_changes
from brnn_core.runs.retention import resume_problem
from brnn_core.runs.rundir import Run, RunError
from brnn_core.runs.seeds import SeedsError
from brnn_core.schedule import SCHEDULES
from brnn_core.states import ACTIVE_STATES, ENDED_STATES, RESUMABLE_STATES, State
from ui.branch import branch_form
from ui.common import (
    LIVE_REFRESH_S,
    TRAINED_IN,
    active_run_id,
    flash,
    folders,
    memo,
    precision_label,
    registry,
    run_picker,
    select_run,
    short_id,
    show_flashes,
    state_label,
)
from ui.gradient_flow import gradient_flow_section, layer_picker
from ui.lr_finder import lr_finder_panel
from ui.state import SEEDS_KEY, filled_from, form_key, form_now, form_seeds, seeds_text, train_form
from ui.warmup import predraw_progress

runs_dir, data_dir = folders()
form = train_form(data_dir)  # survives page changes; complete however another page filled it
asked = {k: st.session_state.get(form_key(k), form[k]) for k in ("cell", "bidirectional", "amp", "device")}
st.title("Train a recurrent network")
st.caption(f"The form trains a {network_name(TrainConfig(cell=asked['cell'], bidirectional=asked['bidirectional']))}: "
           "each 28×28 image is read row by row, 28 steps of 28 pixels, "
           + ("top down and bottom up" if asked["bidirectional"] else "top down")
           + f"; mixed precision {precision_label(asked['amp'], asked['device'])} (Advanced).")
predraw_progress(runs_dir, data_dir)
run = run_picker(runs_dir)
status = run.status() if run else {}
state = status.get("state")
active = state in ACTIVE_STATES
show_flashes()

# ------------------------------------------------------------------ the form
defaults = TrainConfig(dataset=default_dataset(data_dir))


error_slots: dict = {}
labels: dict[str, str] = {}
seed_problem: dict[str, str] = {}  # what is wrong with the Seeds text (not a TrainConfig field)


def field(name: str, widget, *, start=None, **kwargs):
    """Draw one config widget, remember its value, and keep a slot under it for its validation error. The
    widget starts from the remembered form (or `start`), not from a reset default."""
    kwargs.setdefault("help", TrainConfig.help_for(name))
    key = form_key(name)
    # set again on every run: the page is also served at /train (ui.navigation), where its widgets have other ids,
    # and a widget whose id is new would start from its bare default, not from what the session typed
    st.session_state[key] = st.session_state.get(key, form[name] if start is None else start)
    value = widget(key=key, **kwargs)
    form[name] = value
    error_slots[name] = st.empty()
    labels[name] = kwargs["label"]
    return value


def seeds_field() -> None:
    """Seeds: one run per seed ("0,1,2" starts a seed group); the first is the form's seed."""
    st.session_state[SEEDS_KEY] = seeds_text()  # its default: the form's one seed; set again as `field` says why
    st.text_input("Seeds", key=SEEDS_KEY, help="One run per seed, queued one after another: 0,1,2 trains the same "
                  "settings three times (a seed group, shown as mean ± std on the Runs page). "
                  + TrainConfig.help_for("seed"))
    labels["seeds"] = "Seeds"
    error_slots["seeds"] = st.empty()
    try:
        form["seed"] = form_seeds()[0]
    except SeedsError as exc:
        seed_problem["seeds"] = str(exc)


left, right = st.columns([1, 2], gap="large")
with left:
    st.subheader("Hyperparameters")
    source = filled_from()
    if source:
        st.info(f"Filled in from {source}: check them, then **Start training**.", icon=":material/input:")
    if active:
        st.info(f"Run **{run.id}** is {state}: change its learning rate, clipping, epochs and augmentation live "
                "on the right. This form is for the next run: **Start training** queues it behind what trains.")
    device_options = device_choices()
    with st.expander("Data and device", expanded=not active):
        field("dataset", st.selectbox, label="Dataset", options=list(DATASETS),
              format_func=lambda n: DATASETS[n].title)
        st.caption(f"{DATASETS[form['dataset']].description} **Status:** {availability(form['dataset'], data_dir)}")
        field("device", st.selectbox, label="Device", options=list(device_options),
              start=form["device"] if form["device"] in device_options else "auto",
              format_func=lambda d: device_options[d])
        if not torch.cuda.is_available():
            st.caption("No CUDA GPU on this machine: training runs on the CPU.")
        field("val_fraction", st.number_input, label="Validation fraction", step=0.05, format="%.2f")
    with st.expander("Fine-tune on my drawings", expanded=False):
        field("init_from", st.text_input, label="Start from checkpoint",
              placeholder="runs/<id>/checkpoints/best.pt (empty: random weights)")
        field("my_drawings", st.number_input, label="My drawings share", step=0.05, format="%.2f")
    with st.expander("Model", expanded=not active):
        field("cell", st.selectbox, label="Cell", options=list(CELL_NAMES), format_func=lambda c: CELL_TITLES[c])
        field("bidirectional", st.toggle, label="Two-way (read bottom up too)")
        for name, label in (("hidden_size", "Hidden size"), ("num_layers", "Recurrent layers")):
            field(name, st.number_input, label=label, step=1)
        field("dropout", st.number_input, label="Dropout", step=0.05, format="%.2f")
        field("head", st.selectbox, label="Head", options=HEADS,
              format_func=lambda h: f"auto: {resolve_head(h, bool(form['bidirectional']))} for this direction"
              if h == "auto" else h)
        field("input_scale", st.selectbox, label="Input scale", options=list(INPUT_SCALES))
    with st.expander("Optimisation", expanded=not active):
        field("optimizer", st.selectbox, label="Optimizer", options=OPTIMIZERS)
        for name, label, fmt, step in (("lr", "Learning rate", "%.5f", 0.001), ("batch_size", "Batch size", None, 10),
                                       ("epochs", f"Epochs ({epochs_auto_label(form['dataset'])})", None, 1),
                                       ("momentum", "SGD momentum", "%.3f", 0.05),
                                       ("weight_decay", "Weight decay", "%.5f", 0.0001),
                                       ("grad_clip", "Gradient clipping (0 = off)", "%.2f", 0.5)):
            kwargs = {"format": fmt} if fmt else {}
            field(name, st.number_input, label=label, step=step, **kwargs)
        field("lr_schedule", st.selectbox, label="Learning-rate schedule", options=list(SCHEDULES))
        field("augment", st.selectbox, label="Augmentation (training images only)", options=list(AUGMENT_LEVELS),
              format_func=lambda a: f"auto: {resolve_augment(a, form['dataset'])} for this dataset"
              if a == "auto" else a)
        field("drawn_share", st.number_input, label="Pen-stroke copies of the training digits (share)", step=0.1,
              format="%.2f")
    with st.expander("Advanced"):
        seeds_field()
        for name, label in (("log_interval", "Log every N steps"),
                            ("eval_batch_size", "Evaluation batch size"), ("cpu_threads", "CPU threads (0 = auto)"),
                            ("gradient_flow_every", "Gradient flow every N steps (0 = off)")):
            field(name, st.number_input, label=label, step=1)
        field("amp", st.selectbox, label="Mixed precision", options=AMP_MODES,
              format_func=lambda a: precision_label(a, form["device"]))

    try:
        config = TrainConfig.from_dict(form)
        errors = {}
    except ConfigError as exc:
        config, errors = None, exc.errors
    errors = {**errors, **seed_problem}
    for name, message in errors.items():
        if name in error_slots:
            error_slots[name].error(f"{labels[name]}: {message}", icon=":material/error:")
    lr_finder_panel(config, runs_dir, data_dir, training=active)


# ------------------------------------------------------------------ buttons
def on_start() -> None:
    """Start one run per seed; while something trains they wait in the queue (the page says where)."""
    busy = registry().busy(runs_dir)
    try:
        seeds = form_seeds()
        new = registry().start_seeds(runs_dir, TrainConfig.from_dict(form_now(data_dir)), seeds, data_dir=data_dir)
    except (ConfigError, RunError, SeedsError, OSError) as exc:
        flash("error", f"Not started: {exc}")
        st.session_state["busy_with"] = getattr(exc, "run_id", None)  # a link to the run it duplicates
        return
    select_run(new[0].id)
    filled_from(forget=True)  # trained: the form is now simply the last one used
    # where the queue puts it now (a sweep holding the machine counts too), else what was seen busy before
    where = queue_place(new[0]) or busy
    if where:
        flash("info", f"Queued {', '.join(r.id for r in new)} ({where.removeprefix('queued: ')}): "
              f"{'they start one after another' if len(new) > 1 else 'it starts'} when the device is free.")
    else:
        flash("success", f"Started run {new[0].id}." + (f" Queued after it: {', '.join(r.id for r in new[1:])}."
                                                        if len(new) > 1 else ""))


def sent_or_said(send):
    """send()'s result, or None with the reason flashed (a run linked in from elsewhere is read-only here)."""
    try:
        return send()
    except (RunError, OSError) as exc:
        flash("error", f"Not sent: {exc}")
        return None


def on_command(cmd: str) -> None:
    cid = sent_or_said(lambda: run.send_command(cmd))
    if cid is None:
        return
    st.session_state.setdefault("pending", {}).setdefault(run.id, {})[cid] = cmd.capitalize()
    flash("info", {"pause": "Pausing…", "resume": "Resuming…", "stop": "Stopping: saving a checkpoint first…"}[cmd])


def on_cancel() -> None:
    """Take the queued run out of the queue: its worker ends it `stopped` (it never trained, nothing is lost)."""
    cid = sent_or_said(lambda: run.send_command(STOP))
    if cid is None:
        return
    st.session_state.setdefault("pending", {}).setdefault(run.id, {})[cid] = "Cancel"
    flash("info", f"Cancelling {run.id}: it leaves the queue…")


def on_resume_checkpoint() -> None:
    try:
        registry().resume(run, data_dir=data_dir)
    except (RunError, OSError) as exc:
        flash("error", f"Cannot resume: {exc}")
        st.session_state["busy_with"] = active_run_id(runs_dir)
        return
    st.session_state.get("pending", {}).pop(run.id, None)  # the last worker's commands are answered and done
    flash("info", f"Resuming {run.id} from its last checkpoint…")


# ------------------------------------------------------------------ live controls
def live_wanted() -> dict:
    return {name: st.session_state.get(f"live_{name}") for name in LIVE_FIELDS}


def live_controls_for(run_id: str) -> None:
    """The live controls start from this run's values: what they held for another run is dropped (a widget's
    session state wins over the `value` it is drawn with)."""
    if st.session_state.get("live_for") != run_id:
        for name in LIVE_FIELDS:
            st.session_state.pop(f"live_{name}", None)
        st.session_state["live_for"] = run_id


def on_apply_live(current: dict) -> None:
    wanted = live_wanted()
    if live_problems(run, wanted):
        return  # the fields say what is wrong; nothing is sent
    sent = sent_or_said(lambda: send_live_changes(run, current, wanted))
    if sent is None:
        return
    st.session_state.setdefault("pending", {}).setdefault(run.id, {}).update(sent)
    # a toast: it goes by itself, while the outcome of each change shows in the live panel until it is answered
    st.toast("Sent: " + ", ".join(sent.values()) if sent else "Nothing changed.", icon=":material/send:")


can_resume_ckpt = run is not None and state in RESUMABLE_STATES and run.last_ckpt.is_file()
with right:
    b1, b2, b3, b4 = st.columns(4)
    if errors:
        st.error("Fix the highlighted hyperparameters before starting: "
                 + ", ".join(labels.get(name, name) for name in errors))
    b1.button("Start training", type="primary", on_click=on_start, disabled=bool(errors),
              help="Creates a new run (one per seed) and trains it in the background; while another run trains, "
                   "it waits in the queue and starts when the device is free.", use_container_width=True)
    b2.button("Pause", on_click=on_command, args=("pause",), disabled=state not in (State.RUNNING, State.LOADING),
              use_container_width=True)
    if can_resume_ckpt:
        b3.button("Resume", on_click=on_resume_checkpoint, use_container_width=True,
                  help="Continue this run from checkpoints/last.pt.")
    else:
        b3.button("Resume", on_click=on_command, args=("resume",), disabled=state != State.PAUSED,
                  use_container_width=True, help=resume_problem(run) if run is not None else None)
    if state == State.QUEUED:
        b4.button("Cancel", on_click=on_cancel, use_container_width=True,
                  help="Takes this run out of the queue; it never trained, so nothing is lost.")
    else:
        b4.button("Stop", on_click=on_command, args=("stop",), disabled=not active,
                  help="Saves last.pt, then ends the run (it can be resumed).", use_container_width=True)
    note, link = st.empty(), st.empty()  # always two slots here: what follows keeps its place
    if active and not errors:
        note.caption(f"**Start training** queues a new run while this run is {state}: it starts when the device "
                     "is free (one run per device).")
    busy_with = st.session_state.pop("busy_with", None)
    if busy_with and (run is None or busy_with != run.id):
        link.button(f"Show that run ({short_id(busy_with)})", on_click=select_run, args=(busy_with,),
                    icon=":material/arrow_forward:")


with right:
    if run is None:
        st.info("No runs yet: pick hyperparameters on the left and press **Start training**. The defaults start "
                "from the blog's (hidden 128, 2 layers, batch 100, lr 0.01, Adam) with a cosine learning-rate "
                "schedule, augmentation and epochs chosen per dataset, so a run lasts long enough to try the live "
                "controls and reads what you draw well.")
        st.stop()
    if active:
        live = live_settings(run, status)
        live_controls_for(run.id)
        with st.container(border=True):
            st.markdown("**Live controls** (applied between steps, acknowledged in the event log)")
            cols = dict(zip(LIVE_FIELDS, st.columns([1.4, 1.1, 1.1, 1.2]), strict=True))
            cols["lr"].number_input("Peak learning rate", value=float(live["lr"]), format="%.5f", step=0.001,
                                    key="live_lr", min_value=0.0, help=TrainConfig.help_for("lr"))
            cols["grad_clip"].number_input("Gradient clipping", value=float(live["grad_clip"]), step=0.5,
                                           key="live_grad_clip", min_value=0.0, help=TrainConfig.help_for("grad_clip"))
            cols["epochs"].number_input("Total epochs", value=int(live["epochs"]), step=1, key="live_epochs",
                                        min_value=1, help=TrainConfig.help_for("epochs"))
            cols["augment"].selectbox("Augmentation", AUGMENT_LEVELS, index=AUGMENT_LEVELS.index(live["augment"]),
                                      key="live_augment", help=TrainConfig.help_for("augment"))
            problems = live_problems(run, live_wanted())
            for name, message in problems.items():
                cols[name].error(message, icon=":material/error:")
            st.button("Apply", on_click=on_apply_live, args=(live,), disabled=bool(problems), type="primary",
                      help="Send the changed values to the worker; it applies them before its next step.")
    elif state in ENDED_STATES:
        branch_form(run, runs_dir, data_dir, key="train_branch")
    o1, o2, o3 = st.columns([2, 1, 1])
    smoothing = o1.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, help="Exponential moving average, as in TensorBoard.")
    log_y = o2.toggle("Log scale (loss)", value=False)
    flow_layer = layer_picker(o3, run.config().get("train") or {})


def cached_figures(live_run: Run, metrics, smoothing: float, log_y: bool, plan: tuple) -> list:
    """Rebuild the four figures only when metrics.csv grew or a chart option changed. Only the training-loss
    figure changes with every log: the epoch charts change at epoch ends, the lr chart (the schedule's plan)
    when the lr or epochs change, so the browser redraws one chart per refresh, not four."""
    rev = live_run.id  # uirevision: the user's zoom survives redraws of the same run
    key = (live_run.id, len(metrics), smoothing, log_y, len(plan[0]), plan[0][-1:], plan[1][-1:])
    return memo("figures", key, lambda: [
        charts.train_loss_figure(metrics, smoothing=smoothing, log_y=log_y, revision=rev),
        charts.epoch_loss_figure(metrics, revision=rev), charts.accuracy_figure(metrics, revision=rev),
        charts.lr_figure(plan, revision=rev)])


def panel_message(live_run: Run, s: dict) -> str:
    """The line under the run's heading: its status message; for a queued run, where it stands in line, also
    before its worker has said so."""
    message = s.get("message") or ""
    if s.get("state") == State.QUEUED and not message.startswith("queued:"):
        return queue_place(live_run) or message
    return message


def show_answers(live_run: Run, s: dict, events: list[dict]) -> None:
    """The worker's answers to the live changes this session sent the run (the last three)."""
    sent = st.session_state.get("pending", {}).get(live_run.id, {})
    if s.get("state") not in ACTIVE_STATES:  # what was sent to this run is answered: its state says the rest
        sent = {}
        st.session_state.get("pending", {}).pop(live_run.id, None)
    answers = st.container()  # one element, however many answers: the elements after it keep their place
    for outcome in outcomes(events, dict(list(sent.items())[-3:])):
        if outcome.result == "applied":
            answers.success(f"{outcome.label}: applied, {outcome.message}", icon=":material/check:")
        elif outcome.result == "done":
            answers.info(f"{outcome.label}: {outcome.message}", icon=":material/check:")
        elif outcome.result == "refused":
            answers.warning(f"{outcome.label}: {outcome.message}")
        else:
            answers.caption(f"{outcome.label}: waiting for the worker…")


def live_panel(run_path: str, seen_state: str | None, smoothing: float, log_y: bool, flow_layer: int) -> None:
    """Re-reads the run directory on a timer; a state change reruns the whole page (buttons)."""
    live_run = Run(run_path)
    s = live_run.status()
    if s.get("state") != seen_state:
        st.rerun()
    config = live_run.config()
    train = config.get("train") or {}
    network = f" · {network_name(ModelConfig(**architecture(train)))}" if train else ""  # the run's, not the form's
    trained_in = TRAINED_IN.get(config.get("amp"))  # what its worker resolved amp to, once it has started
    st.markdown(f"### {state_label(s.get('state'))} · `{live_run.id}`{network}"
                + (f" · {trained_in}" if trained_in else ""))
    message = panel_message(live_run, s)
    slot = st.empty()  # always one element here: a changing element count leaves stale copies on screen
    if message and not (s.get("state") == State.RUNNING and message.startswith("epoch ")):  # the progress line has it
        kind = {State.FAILED: slot.error, State.DIVERGED: slot.error, State.INTERRUPTED: slot.warning,
                State.QUEUED: slot.info}.get(s.get("state"), slot.caption)  # queued: where it stands in line
        kind(message)
    total = s.get("total_steps") or 0
    batch = train.get("batch_size")
    metrics = live_run.metrics()
    logged = metrics[metrics["split"] == "train"]
    pace = Pace.from_points(logged["step"], logged["elapsed_s"])  # the ETA the CLI prints, from the same points
    st.progress(min((s.get("step") or 0) / total, 1.0) if total else 0.0, text=progress_text(s, batch, pace) or (
        "waiting…" if s.get("state") in ACTIVE_STATES else "no step trained"))
    events = live_run.events()
    show_answers(live_run, s, events)
    m1, m2, m3, m4 = st.columns(4)
    val = metrics[metrics["split"] == "val"]
    m1.metric("train loss", f"{logged['loss'].iloc[-1]:.4f}" if len(logged) else "–")
    m2.metric("val loss", f"{val['loss'].iloc[-1]:.4f}" if len(val) else "–")
    m3.metric("val accuracy", f"{100 * val['accuracy'].iloc[-1]:.2f}%" if len(val) else "–")
    m4.metric("test accuracy", f"{100 * s['test_acc']:.2f}%" if s.get("test_acc") is not None else "–")
    plan = lr_plan(config, s, events, start=int((config.get("parent") or {}).get("step", 0)))  # a branch: its own
    figures = cached_figures(live_run, metrics, smoothing, log_y, plan)
    loss_col, epoch_col = st.columns(2)
    loss_col.plotly_chart(figures[0], key="chart_train", on_select="ignore")
    epoch_col.plotly_chart(figures[1], key="chart_epoch", on_select="ignore")
    acc_col, lr_col = st.columns(2)
    acc_col.plotly_chart(figures[2], key="chart_acc", on_select="ignore")
    lr_col.plotly_chart(figures[3], key="chart_lr", on_select="ignore")
    gradient_flow_section(live_run, config.get("train") or {}, s.get("state"), flow_layer)
    # keyed, its open state is the session's (not the browser element's): it stays open through the reruns that
    # a state change (pause, resume) makes, which redraw the panel
    with st.expander("Event log", key="event_log", on_change="rerun"):
        st.caption(f"{len(events)} events, newest first" + (" (the last 50)" if len(events) > 50 else ""))
        for e in reversed(events[-50:]):
            if e.get("kind") != "traceback":
                step = f"step {e['step']} · " if e.get("step") is not None else ""
                st.text(f"{e['time'][11:19]} · {step}{event_text(e)}")


with right:
    # Every LIVE_REFRESH_S while the run can change: each redraw takes CPU from training on a small machine
    # (docs/decisions/008-live-refresh-interval.md). An ended run is only watched for a resume from elsewhere
    # (the CLI, another tab), which a slower poll catches.
    st.fragment(run_every=LIVE_REFRESH_S if active else 5.0)(live_panel)(str(run.path), state, smoothing, log_y,
                                                                         flow_layer)
