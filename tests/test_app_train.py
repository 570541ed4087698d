"""Train page, headless with Streamlit's AppTest: form defaults, validation, run controls, current run."""

from __future__ import annotations

import pytest
from helpers import build_app, copy_run, no_exception, wait_for, wait_for_state
from streamlit.testing.v1 import AppTest

from brnn_core.runs.rundir import list_runs


def start_button(at):
    return next(b for b in at.button if b.label == "Start training")


def app() -> AppTest:
    return build_app().run()


CONTROLS = ("Start training", "Pause", "Resume", "Stop")


def buttons(at: AppTest) -> dict[str, bool]:
    """Run-control button label -> enabled."""
    return {b.label: not b.disabled for b in at.button if b.label in CONTROLS}


def test_renders_with_no_runs(dirs):
    at = app()
    no_exception(at)
    assert at.title[0].value == "Train a bidirectional LSTM"
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
    assert at.selectbox(key="w_head").value == "bidir"
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
    assert query_run(at) == run.id
    assert {m.label for m in at.metric} >= {"train loss", "val loss", "val accuracy", "test accuracy"}
    test_acc = next(m for m in at.metric if m.label == "test accuracy").value
    assert test_acc.endswith("%")


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
    assert any("Started run" in s.value for s in at.success)
    runs = list_runs(runs_dir)
    assert len(runs) == 1
    run = runs[0]
    assert query_run(at) == run.id
    assert at.session_state["current_run"] == run.id
    assert run.config()["train"]["hidden_size"] == 16

    wait_for_state(run, "running")
    at.run()
    no_exception(at)
    assert buttons(at) == {"Start training": False, "Pause": True, "Resume": False, "Stop": True}
    assert at.number_input(key="w_hidden_size").disabled  # architecture fixed while it trains
    assert at.number_input(key="live_lr").value == pytest.approx(0.01)  # live controls shown
    assert any(b.label == "Apply" for b in at.button)

    next(b for b in at.button if b.label == "Pause").click().run()
    wait_for_state(run, "paused")
    at.run()
    assert buttons(at) == {"Start training": False, "Pause": False, "Resume": True, "Stop": True}

    # A live change while paused: applied between steps and acknowledged in the event log.
    at.number_input(key="live_lr").set_value(0.001)
    next(b for b in at.button if b.label == "Apply").click().run()
    assert any("Sent: lr → 0.001" in t.value for t in at.toast)
    wait_for(lambda: any(e["kind"] == "set" for e in run.events()), 120, "the worker to apply lr", interval=0.2)
    at.run()
    acks = [s.value for s in at.success]
    assert any("lr → 0.001: applied, lr 0.01 -> 0.001 at step" in a for a in acks), acks
    assert run.status()["live"]["lr"] == pytest.approx(0.001)

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
def test_other_sessions_see_the_active_run_and_cannot_start_another(dirs):
    runs_dir, _ = dirs
    at = app()
    at.number_input(key="w_hidden_size").set_value(16)
    at.number_input(key="w_epochs").set_value(500)
    at.run()
    start_button(at).click().run()
    run = list_runs(runs_dir)[0]
    wait_for_state(run, ("loading", "running"))
    # A second browser session opens the page: it follows the active run and cannot start another.
    other = app()
    assert buttons(other)["Start training"] is False
    assert query_run(other) == run.id
    run.send_command("stop")
    wait_for_state(run, ("stopped", "finished"))
    assert len(list_runs(runs_dir)) == 1


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
