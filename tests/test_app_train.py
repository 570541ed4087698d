"""Train page, headless with Streamlit's AppTest: form defaults, validation, run controls, current run."""

from __future__ import annotations

import json
import os
import socket
import time

import psutil
import pytest
from helpers import build_app, copy_run, no_exception, rerun_until, wait_for, wait_for_state
from streamlit.testing.v1 import AppTest

from brnn_core.fileio import atomic_write_json
from brnn_core.runs import job_queue as queue
from brnn_core.runs import lifecycle
from brnn_core.runs.gradient_flow import read_gradient_flow
from brnn_core.runs.rundir import list_runs


def start_button(at):
    return next(b for b in at.button if b.label == "Start training")


def app() -> AppTest:
    return build_app().run()


CONTROLS = ("Start training", "Pause", "Resume", "Stop", "Cancel")


def buttons(at: AppTest) -> dict[str, bool]:
    """Run-control button label -> enabled."""
    return {b.label: not b.disabled for b in at.button if b.label in CONTROLS}


def test_renders_with_no_runs(dirs):
    at = app()
    no_exception(at)
    assert at.title[0].value == "Train a recurrent network"
    assert any("The form trains a two-way LSTM (BiLSTM)" in c.value for c in at.caption)
    assert any("No runs yet" in i.value for i in at.info)
    assert buttons(at) == {"Start training": True, "Pause": False, "Resume": False, "Stop": False}


def test_form_shows_the_blog_defaults(dirs):
    at = app()
    values = {n.key: n.value for n in at.number_input}
    assert values["w_hidden_size"] == 128
    assert values["w_num_layers"] == 2
    assert values["w_batch_size"] == 100
    assert values["w_lr"] == pytest.approx(0.01)
    assert values["w_epochs"] == 0  # auto: the dataset's number (config.EPOCHS_AUTO) once the run is made
    assert at.selectbox(key="w_optimizer").value == "adam"
    assert at.selectbox(key="w_head").value == "auto"  # bidir for this two-way net, once the run is made
    assert at.selectbox(key="w_cell").value == "lstm" and at.toggle(key="w_bidirectional").value is True
    assert at.selectbox(key="w_dataset").value == "mnist-sample"  # no full MNIST in the empty data folder


def inline_error_after(at: AppTest, label: str) -> str | None:
    """The error element drawn directly under the widget with this label, if any."""
    for expander in at.expander:
        children = list(expander.children.values())
        for i, child in enumerate(children):
            if getattr(child, "label", None) == label and i + 1 < len(children):
                nxt = children[i + 1]
                return nxt.value if type(nxt).__name__ == "Error" else None
    raise AssertionError(f"no widget labelled {label!r}")


@pytest.mark.parametrize(("key", "label", "bad"), [("w_hidden_size", "Hidden size", 0),
                                                   ("w_lr", "Learning rate", -1.0)])
def test_invalid_value_shows_inline_error_and_disables_start(dirs, key, label, bad):
    at = app()
    assert inline_error_after(at, label) is None
    at.number_input(key=key).set_value(bad).run()
    no_exception(at)
    inline = inline_error_after(at, label)
    assert inline is not None and inline.startswith(f"{label}:") and "out of range" in inline
    assert any("Fix the highlighted hyperparameters" in e.value and label in e.value for e in at.error)
    assert buttons(at)["Start training"] is False
    # Back to a good value: the error goes and Start comes back.
    at.number_input(key=key).set_value(64 if key == "w_hidden_size" else 0.01).run()
    assert inline_error_after(at, label) is None
    assert not at.error
    assert buttons(at)["Start training"] is True


def test_finished_run_buttons_and_panel(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    at = app()
    no_exception(at)
    assert buttons(at) == {"Start training": True, "Pause": False, "Resume": False, "Stop": False}
    panel = " ".join(m.value for m in at.markdown)
    assert run.id in panel and "finished" in panel
    assert f"`{run.id}` · two-way LSTM (BiLSTM) · fp32" in panel  # the precision it trained in (config.json's amp)
    assert query_run(at) == run.id
    assert {m.label for m in at.metric} >= {"train loss", "val loss", "val accuracy", "test accuracy"}
    test_acc = next(m for m in at.metric if m.label == "test accuracy").value
    assert test_acc.endswith("%")
    atomic_write_json(run.config_path, {**run.config(), "amp": "bf16"})  # what amp=auto resolves to on such a CPU
    at.run()
    assert f"`{run.id}` · two-way LSTM (BiLSTM) · bf16" in " ".join(m.value for m in at.markdown)


def query_run(at: AppTest) -> str:
    value = at.query_params.get("run")
    return value[0] if isinstance(value, list) else value


def test_query_param_selects_the_run(dirs, finished):
    runs_dir, _ = dirs
    older = copy_run(finished, runs_dir, "20000101-000000-mnist-sample-0000")
    newer = copy_run(finished, runs_dir, "20990101-000000-mnist-sample-ffff")
    at = app()
    assert query_run(at) == newer.id  # newest by default
    at = build_app()
    at.query_params["run"] = older.id
    at.run()
    no_exception(at)
    assert query_run(at) == older.id
    assert any(older.id in m.value for m in at.markdown)
    assert at.sidebar.selectbox(key="run_picker").value == older.id
    # Another page and back: the session keeps its run.
    at.switch_page("pages/runs.py").run()
    at.switch_page("pages/train.py").run()
    assert query_run(at) == older.id
    assert at.sidebar.selectbox(key="run_picker").value == older.id
    # Picking in the sidebar changes the current run.
    at.sidebar.selectbox(key="run_picker").select(newer.id).run()
    assert query_run(at) == newer.id
    assert any(newer.id in m.value for m in at.markdown)
    assert not at.warning


def test_a_link_to_a_run_that_does_not_exist_says_so(dirs, finished):
    runs_dir, _ = dirs
    newest = copy_run(finished, runs_dir, "20990101-000000-mnist-sample-ffff")
    at = build_app()
    at.query_params["run"] = "20200101-000000-mnist-sample-gone"  # deleted, or mistyped
    at.run()
    no_exception(at)
    assert [w.value for w in at.warning] == [f"There is no run `20200101-000000-mnist-sample-gone` in {runs_dir}: "
                                             f"showing {newest.id} instead."]
    assert query_run(at) == newest.id  # the address now names the run shown


@pytest.mark.worker
@pytest.mark.slow
def test_start_pause_resume_stop_a_real_worker(dirs):
    runs_dir, _ = dirs
    at = app()
    at.number_input(key="w_hidden_size").set_value(16)
    at.number_input(key="w_epochs").set_value(500)  # long enough to catch it running; stopped below
    at.run()
    start_button(at).click().run()
    no_exception(at)
    assert any("Started run" in s.value or "Queued" in s.value for s in at.success)  # queued: behind a predraw
    runs = list_runs(runs_dir)
    assert len(runs) == 1
    run = runs[0]
    assert query_run(at) == run.id
    assert at.session_state["current_run"] == run.id
    assert run.config()["train"]["hidden_size"] == 16

    wait_for_state(run, "running")
    at.run()
    no_exception(at)
    # Start stays on: it queues the next run; the form is that next run's
    assert buttons(at) == {"Start training": True, "Pause": True, "Resume": False, "Stop": True}
    assert not at.number_input(key="w_hidden_size").disabled
    assert at.number_input(key="live_lr").value == pytest.approx(0.01)  # live controls shown
    assert any(b.label == "Apply" for b in at.button)

    next(b for b in at.button if b.label == "Pause").click().run()
    wait_for_state(run, "paused")
    at.run()
    assert buttons(at) == {"Start training": True, "Pause": False, "Resume": True, "Stop": True}

    # A live change while paused: applied between steps and acknowledged in the event log.
    at.number_input(key="live_lr").set_value(0.001)
    next(b for b in at.button if b.label == "Apply").click().run()
    assert any("Sent: lr → 0.001" in t.value for t in at.toast)
    wait_for(lambda: any(e["kind"] == "set" for e in run.events()), 120, "the worker to apply lr", interval=0.2)
    at.run()
    acks = [s.value for s in at.success]
    assert any("lr → 0.001: applied, lr 0.01 -> 0.001 at step" in a for a in acks), acks
    # the session logs the ack, then writes status.json: on a busy machine the page can read the ack first
    assert wait_for(lambda: run.status()["live"]["lr"] == pytest.approx(0.001), 30, "live lr in status.json")

    next(b for b in at.button if b.label == "Resume").click().run()
    wait_for_state(run, "running")
    at.run()
    assert buttons(at)["Pause"] is True

    next(b for b in at.button if b.label == "Stop").click().run()
    status = wait_for_state(run, "stopped")
    assert "checkpoint saved" in status["message"]
    at.run()
    no_exception(at)
    # A stopped run with last.pt: Start a new run, or Resume this one from its checkpoint.
    assert buttons(at) == {"Start training": True, "Pause": False, "Resume": True, "Stop": False}
    assert query_run(at) == run.id


@pytest.mark.worker
@pytest.mark.slow
def test_other_sessions_see_the_active_run_and_may_queue_another(dirs):
    runs_dir, _ = dirs
    at = app()
    at.number_input(key="w_hidden_size").set_value(16)
    at.number_input(key="w_epochs").set_value(500)
    at.run()
    start_button(at).click().run()
    run = list_runs(runs_dir)[0]
    wait_for_state(run, ("loading", "running"))
    # A second browser session opens the page: it follows the active run, and its Start would queue one more.
    other = app()
    assert buttons(other)["Start training"] is True
    assert any("**Start training** queues a new run while this run is" in c.value for c in other.caption)
    assert query_run(other) == run.id
    run.send_command("stop")
    wait_for_state(run, ("stopped", "finished"))
    assert len(list_runs(runs_dir)) == 1


def training_elsewhere(finished, runs_dir):
    """A copy of a finished run that reads as training on the cpu, and the cpu's slot held by this test process
    (its stand-in worker): runs started now must wait in the queue."""
    run = copy_run(finished, runs_dir)
    me = psutil.Process()
    run.write_status(state="running", message="epoch 1/5", pid=me.pid, pid_started=me.create_time(), slot="cpu",
                     host=socket.gethostname(), heartbeat=time.time(), ended=None)
    slot = queue.try_take(runs_dir, "cpu")
    assert slot is not None
    return run, slot


def info_texts(at: AppTest) -> list[str]:
    return [i.value for i in at.info]


@pytest.mark.worker
def test_a_run_that_must_wait_is_announced_as_queued_with_its_place(dirs):
    """Nothing trains, but a sweep holds the machine: the new run waits, and the page says so and why at once
    (before its worker has said it), in the announcement and in the run's panel."""
    runs_dir, _ = dirs
    sweep = queue.new_job(runs_dir, "sweep", queue.EVERY_SLOT, title="sweep 20261203-120000-sweep")
    lifecycle.joined_queue(sweep, os.getpid())  # this process stands in for the sweep's driver
    slot = queue.try_take(runs_dir, "cpu")
    lifecycle.took_slots(sweep, ("cpu",), "running")
    try:
        at = app()
        at.number_input(key="w_hidden_size").set_value(8)
        start_button(at).click().run()
        no_exception(at)
        [run] = list_runs(runs_dir)
        place = "1st in line, behind sweep 20261203-120000-sweep on cpu"
        assert not at.success, [s.value for s in at.success]  # not "Started run", not green
        assert f"Queued {run.id} ({place}): it starts when the device is free." in info_texts(at)
        assert f"queued: {place}" in info_texts(at)  # the panel says where it stands, not just "queued"
    finally:
        slot.release()


def test_live_controls_show_the_shown_runs_values(dirs, finished):
    """A session that showed one queued run's live controls, then another's: the second run's own values."""
    runs_dir, _ = dirs
    runs = {}
    for epochs, run_id in ((4, "20261203-100000-mnist-sample-aaaa"), (3, "20261203-100100-mnist-sample-bbbb")):
        run = copy_run(finished, runs_dir, run_id)
        config = json.loads(run.config_path.read_text())
        config["train"]["epochs"] = epochs
        run.config_path.write_text(json.dumps(config))
        run.write_status(state="queued", step=0, epoch=0, live=None, test_acc=None)
        lifecycle.joined_queue(run, os.getpid())  # this process stands in for its queued worker
        runs[epochs] = run
    at = build_app()
    at.query_params["run"] = runs[4].id
    at.run()
    assert at.number_input(key="live_epochs").value == 4
    at.sidebar.selectbox(key="run_picker").select(runs[3].id).run()
    no_exception(at)
    assert at.number_input(key="live_epochs").value == 3


@pytest.mark.worker
def test_start_while_a_run_trains_queues_a_seed_group_that_a_fresh_session_sees_and_cancel_works(dirs, finished):
    runs_dir, _ = dirs
    busy, slot = training_elsewhere(finished, runs_dir)
    try:
        at = app()
        assert at.sidebar.selectbox(key="run_picker").value == busy.id
        assert buttons(at)["Start training"] is True
        assert at.text_input(key="w_seeds").value == "0"
        at.number_input(key="w_hidden_size").set_value(8)
        at.text_input(key="w_seeds").set_value("5,6")
        start_button(at).click().run()
        no_exception(at)
        first, second = sorted((r for r in list_runs(runs_dir) if r.id != busy.id),
                               key=lambda r: r.config()["train"]["seed"])
        assert any(f"Queued {first.id}, {second.id} (1st in line, behind run {busy.id} on cpu): they start one after "
                   "another" in m.value for m in at.info), info_texts(at)
        assert not at.success  # nothing started: not announced in green
        assert first.status()["queued_at"] < second.status()["queued_at"]  # in line in the order of the seeds
        assert query_run(at) == first.id
        rerun_until(at, lambda a: f"queued: 1st in line, behind run {busy.id} on cpu" in info_texts(a),
                    "the page to say where the first run stands", 120)
        assert buttons(at) == {"Start training": True, "Pause": False, "Resume": False, "Cancel": True}

        # A double click: the same settings again are refused, naming the run they repeat
        start_button(at).click().run()
        assert any("Not started" in e.value and "exactly these settings" in e.value for e in at.error)
        assert len(list_runs(runs_dir)) == 3

        # A restarted dashboard (a fresh session, a fresh registry) finds the queue on disk, in order
        fresh = build_app()
        fresh.query_params["run"] = second.id
        fresh.run()
        no_exception(fresh)
        assert f"queued: 2nd in line, behind run {first.id} on cpu" in info_texts(fresh)

        # Cancel the first: it ends stopped without training, and the second moves up
        next(b for b in at.button if b.label == "Cancel").click().run()
        assert any("Cancelling" in m.value for m in at.info), info_texts(at)
        status = wait_for_state(first, "stopped", 60)
        assert status["message"] == "cancelled while queued" and first.metrics().empty
        rerun_until(at, lambda a: any(first.id in m.value and "stopped" in m.value for m in a.markdown),
                    "the page to show the cancelled run stopped", 30)
        assert any("cancelled while queued" in c.value for c in at.caption), [c.value for c in at.caption]
        rerun_until(fresh, lambda a: f"queued: 1st in line, behind run {busy.id} on cpu" in info_texts(a),
                    "the second run to move up", 60)
    finally:
        slot.release()


def test_bad_seeds_show_inline_and_keep_start_off(dirs):
    at = app()
    at.text_input(key="w_seeds").set_value("0,0").run()
    no_exception(at)
    assert buttons(at)["Start training"] is False
    assert any("Seeds: seed 0 is given twice" in e.value for e in at.error), [e.value for e in at.error]
    at.text_input(key="w_seeds").set_value("1, 2").run()
    assert not at.error and buttons(at)["Start training"] is True
    assert at.session_state["form"]["seed"] == 1  # the first seed is the form's seed


@pytest.mark.worker
def test_start_uses_values_changed_in_the_same_rerun(dirs):
    """Typing a value and clicking Start at once: the browser sends both in one rerun, and the run must
    get the typed value, not the one the form held before."""
    runs_dir, _ = dirs
    at = app()
    at.number_input(key="w_hidden_size").set_value(16)
    at.number_input(key="w_epochs").set_value(7)
    start_button(at).click().run()
    no_exception(at)
    run = list_runs(runs_dir)[0]
    assert run.config()["train"]["hidden_size"] == 16
    assert run.config()["train"]["epochs"] == 7


def test_the_form_trains_the_cell_and_direction_picked(dirs):
    """Model section: a one-way GRU, its head named for it; bidir is refused inline for it; the run records both."""
    runs_dir, _ = dirs
    at = app()
    at.selectbox(key="w_cell").select("gru")
    at.toggle(key="w_bidirectional").set_value(False).run()
    no_exception(at)
    assert any("The form trains a one-way GRU: each 28×28 image is read row by row" in c.value and
               "top down; mixed precision auto: " in c.value for c in at.caption)
    head = at.selectbox(key="w_head")
    assert head.options[head.index] == "auto: last for this direction"
    head.select("bidir").run()
    assert "set head=auto or head=last, or bidirectional=true" in inline_error_after(at, "Head")
    assert buttons(at)["Start training"] is False
    at.selectbox(key="w_head").select("auto").run()
    assert inline_error_after(at, "Head") is None
    at.number_input(key="w_hidden_size").set_value(8)
    start_button(at).click().run()
    no_exception(at)
    train = list_runs(runs_dir)[0].config()["train"]
    assert (train["cell"], train["bidirectional"], train["head"], train["hidden_size"]) == ("gru", False, "last", 8)


def test_fine_tune_fields_validate_inline(dirs, finished, tmp_path):
    """Start from checkpoint (init_from) and My drawings share (my_drawings) are form fields like the others."""
    at = app()
    assert at.text_input(key="w_init_from").value == "" and at.number_input(key="w_my_drawings").value == 0.0
    at.text_input(key="w_init_from").set_value(str(tmp_path / "nope.pt")).run()
    no_exception(at)
    assert "no checkpoint file" in inline_error_after(at, "Start from checkpoint")
    assert buttons(at)["Start training"] is False
    at.text_input(key="w_init_from").set_value(str(finished.best_ckpt))
    at.number_input(key="w_my_drawings").set_value(0.6).run()
    assert inline_error_after(at, "Start from checkpoint") is None
    assert "out of range" in inline_error_after(at, "My drawings share")
    at.number_input(key="w_my_drawings").set_value(0.2).run()
    assert not at.error and buttons(at)["Start training"] is True
    assert at.session_state["form"]["init_from"] == str(finished.best_ckpt)
    assert at.session_state["form"]["my_drawings"] == pytest.approx(0.2)


def test_gradient_flow_heatmap_and_why_a_run_has_none(dirs, finished):
    """A run with gradient_flow.csv: a steps x rows heatmap per direction of the chosen layer and its latest
    profile; the layer picked holds for a run with as many layers, and a run with another number starts at its last.
    A run made before the recording existed, and one with it off, say why there is none."""
    runs_dir, _ = dirs
    without = {"20000101-000000-mnist-sample-0000": (None, "trained before gradient flow was recorded"),
               "20000102-000000-mnist-sample-0001": (0, "Gradient flow was off for this run")}
    for run_id, (every, _) in without.items():
        other = copy_run(finished, runs_dir, run_id)
        other.gradient_flow_path.unlink()
        config = json.loads(other.config_path.read_text())
        if every is None:
            del config["train"]["gradient_flow_every"]
        else:
            config["train"]["gradient_flow_every"] = every
        other.config_path.write_text(json.dumps(config))
    twin = copy_run(finished, runs_dir, "20000103-000000-mnist-sample-0002")
    one_layer = copy_run(finished, runs_dir, "20000104-000000-mnist-sample-0003")
    config = json.loads(one_layer.config_path.read_text())
    config["train"]["num_layers"] = 1
    one_layer.config_path.write_text(json.dumps(config))
    run = copy_run(finished, runs_dir, "20990101-000000-mnist-sample-ffff")  # the newest: shown first
    measured = read_gradient_flow(run.gradient_flow_path)
    assert len(measured)
    at = app()
    no_exception(at)
    charts = {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}
    heat, line = charts["chart_flow"], charts["chart_flow_profile"]
    assert heat["layout"]["title"]["text"].startswith("Gradient flow through time · layer 2")
    assert [t["type"] for t in heat["data"]] == ["heatmap", "heatmap"]  # forward and backward
    assert [len(t["x"]) for t in heat["data"]] == [28, 28]
    assert all(len(t["y"]) == measured["step"].nunique() for t in heat["data"])
    assert [t["name"] for t in line["data"]] == ["forward", "backward"]
    assert any("Recorded every 50 steps in the run's gradient_flow.csv" in c.value for c in at.caption)
    at.selectbox(key="flow_layer").select(1).run()
    no_exception(at)
    heat = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == "chart_flow")
    assert heat["layout"]["title"]["text"].startswith("Gradient flow through time · layer 1")
    # the pick holds for another two-layer run; a run with another number of layers starts at its last one
    at.sidebar.selectbox(key="run_picker").select(twin.id).run()
    assert at.selectbox(key="flow_layer").value == 1
    at.sidebar.selectbox(key="run_picker").select(one_layer.id).run()
    assert at.selectbox(key="flow_layer").options == ["1"]
    at.sidebar.selectbox(key="run_picker").select(run.id).run()
    no_exception(at)
    assert at.selectbox(key="flow_layer").value == 2
    for run_id, (_, why) in without.items():
        at.sidebar.selectbox(key="run_picker").select(run_id).run()
        no_exception(at, run_id)
        assert not [c for c in at.get("plotly_chart") if c.key == "chart_flow"]
        assert any(why in i.value for i in at.info), [i.value for i in at.info]


def test_the_event_log_says_each_event_once(dirs, finished):
    """An event whose message starts with its kind ("finished: test accuracy ...") is not prefixed twice."""
    runs_dir, _ = dirs
    copy_run(finished, runs_dir)
    at = build_app()
    at.session_state["event_log"] = True  # the Event log expander, open
    at.run()
    no_exception(at)
    lines = [t.value for t in at.text]
    assert any("finished: test accuracy" in line for line in lines), lines
    assert any(" · epoch 1: train loss" in line for line in lines), lines
    assert not any("finished: finished" in line or "epoch: epoch" in line for line in lines), lines


def test_the_form_keeps_what_was_typed_at_both_addresses(dirs):
    """Train is served at / and at /train (two pages of one script, so two ids per widget): a session that
    moves between them keeps the form as typed, never a bare default such as a learning rate of 0."""
    at = app()
    no_exception(at)
    at.number_input(key="w_hidden_size").set_value(64)
    at.text_input(key="w_seeds").set_value("3,4")
    at.run()
    at.switch_page("pages/train.py").run()  # the page at /train
    no_exception(at)
    values = {n.key: n.value for n in at.number_input}
    assert values["w_hidden_size"] == 64 and values["w_lr"] == 0.01 and values["w_batch_size"] == 100, values
    assert at.text_input(key="w_seeds").value == "3,4"
    assert not at.error, [e.value for e in at.error]
