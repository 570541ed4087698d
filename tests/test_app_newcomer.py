"""A newcomer's first minutes, headless: sessions that open the dashboard on another page than Train (a link,
a reload), so buttons that fill another page's state must work without the Train page having run; uploads,
live values checked before they are sent, views that follow the run, labels that fit."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from helpers import build_app, copy_run, no_exception
from streamlit.testing.v1 import AppTest

from brnn_core.config import TrainConfig
from brnn_core.runs import job_queue as queue
from brnn_core.runs.rundir import list_runs
from brnn_core.sweep.records import BEST_CONFIG, Sweep, sweeps_dir

PAGES = {"pages/train.py": "Train a recurrent network", "pages/predict.py": "Draw a digit",
         "pages/runs.py": "Runs", "pages/compare.py": "Compare", "pages/sweep.py": "Sweep hyperparameters"}
SWEEP_ID = "20261202-090000-sweep-feed"


def fresh_session(page: str) -> AppTest:
    """A new session whose first run is `page` (nothing else ran in it before)."""
    at = build_app(page).run()
    no_exception(at, page)
    assert at.title[0].value == PAGES[page]
    return at


def follow(at: AppTest, page: str) -> AppTest:
    """Where a button calls st.switch_page: AppTest may not follow it as a browser does."""
    if at.title[0].value != PAGES[page]:
        at.switch_page(page).run()
    no_exception(at, page)
    assert at.title[0].value == PAGES[page]
    return at


def sweep_of(runs_dir, trials, best, best_config: dict) -> Sweep:
    """A finished sweep record over real finished runs (`best` among them), with its best-config.json."""
    for run in trials:
        config = run.config() | {"sweep_id": SWEEP_ID}
        run.config_path.write_text(json.dumps(config))
    folder = sweeps_dir(runs_dir) / SWEEP_ID
    folder.mkdir(parents=True)
    sweep = Sweep(folder)
    sweep.write(id=SWEEP_ID, name="first-page", state="finished", message="finished", metric="val_loss",
                scheduler="fifo", address="local", trials=[r.id for r in trials], plan={"trials": len(trials)},
                search={"lr": {"kind": "loguniform", "low": 0.001, "high": 0.01}},
                best={"run_id": best.id, "metric": "val_loss", "value": 0.5, "epoch": 1})
    (folder / BEST_CONFIG).write_text(json.dumps(best_config))
    return sweep


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_opens_first_in_a_fresh_session(dirs, finished, page):
    copy_run(finished, dirs[0])
    fresh_session(page)


def test_train_with_these_settings_from_a_fresh_sweep_tab(dirs, finished):
    """best-config.json holds only what the sweep set: the Train form is still complete (the defaults for
    the rest), and the page draws it with the sweep's values."""
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    sweep_of(runs_dir, [run], run, {"dataset": "mnist-sample", "lr": 0.0042, "hidden_size": 64, "epochs": 3,
                                    "lr_schedule": "constant", "no_such_field": 1})
    at = fresh_session("pages/sweep.py")
    next(b for b in at.button if b.label == "Train with these settings").click().run()
    follow(at, "pages/train.py")
    form = at.session_state["form"]
    assert set(form) == set(TrainConfig().to_dict())  # complete, and nothing unknown
    assert (form["lr"], form["hidden_size"], form["epochs"], form["lr_schedule"]) == (0.0042, 64, 3, "constant")
    assert at.number_input(key="w_lr").value == 0.0042 and at.number_input(key="w_cpu_threads").value == 0
    at.switch_page("pages/runs.py").run()  # and it stays whole on every page change
    at.switch_page("pages/train.py").run()
    no_exception(at)
    assert at.number_input(key="w_hidden_size").value == 64


def test_open_best_in_predict_after_the_picker_was_used(tmp_path, monkeypatch, finished):
    """As `make run` starts it (a relative runs folder), with a checkpoint picked by hand first: the button
    must leave the picker, and the model predicting, on the sweep's best trial."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BRNN_RUNS_DIR", "runs")
    monkeypatch.setenv("BRNN_DATA_DIR", "data")
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    other = copy_run(finished, runs_dir, "20261202-085900-mnist-sample-aaaa")
    best = copy_run(finished, runs_dir, "20261202-085901-mnist-sample-bbbb")
    sweep_of(runs_dir, [best], best, {"lr": 0.003})
    at = fresh_session("pages/predict.py")
    at.sidebar.selectbox(key="ckpt_choice").select(str(other.last_ckpt.resolve())).run()
    no_exception(at)
    assert at.sidebar.selectbox(key="ckpt_choice").value == str(other.last_ckpt.resolve())
    at.switch_page("pages/sweep.py").run()
    next(b for b in at.button if b.label == "Open best in Predict").click().run()
    follow(at, "pages/predict.py")
    assert at.sidebar.selectbox(key="ckpt_choice").value == str(best.best_ckpt.resolve())
    at.switch_page("pages/predict.py").run()  # and it stays there on the next visit
    assert at.sidebar.selectbox(key="ckpt_choice").value == str(best.best_ckpt.resolve())


def test_the_sidebar_run_picker_fits_and_the_runs_table_has_no_none(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    at = fresh_session("pages/train.py")
    picker = at.sidebar.selectbox(key="run_picker")
    shown = picker.options[picker.index]
    assert len(shown) <= 24 and shown.endswith("· finished"), shown  # the sidebar shows ~25 characters
    assert any(c.value == run.id for c in at.sidebar.caption)  # the whole id under it
    at.switch_page("pages/runs.py").run()
    table = at.dataframe(key="runs_table").value
    text_columns = table.select_dtypes(exclude=["number", "bool"])
    assert not text_columns.isna().any().any() and "None" not in text_columns.astype(str).to_numpy()


def test_the_inspected_run_follows_its_state(dirs, finished):
    """The Runs page of a run that is still queued shows it finished once it has, without a reload."""
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    status = json.loads(run.status_path.read_text())
    # queued just now: a queued run without a worker reads as interrupted once its grace since `created` is over
    run.status_path.write_text(json.dumps(status | {"state": "queued", "message": "starting the worker",
                                                    "pid": None, "created": time.time(), "heartbeat": time.time()}))
    at = fresh_session("pages/runs.py")
    assert any("queued" in m.value and "starting the worker" in m.value for m in at.markdown)
    run.status_path.write_text(json.dumps(status))
    at.run()  # the state fragment's timer: AppTest runs each fragment once per run()
    at.run()
    no_exception(at)
    assert any("finished" in m.value for m in at.markdown) and not any("starting the worker" in m.value
                                                                        for m in at.markdown)


def test_an_upload_that_is_no_checkpoint_names_the_users_file(dirs, finished):
    """The user's file name in the error, never the stored path; the run picker stays in view, off while an
    upload is used, and back once it is removed."""
    copy_run(finished, dirs[0])
    at = fresh_session("pages/predict.py")
    picker = at.sidebar.selectbox(key="ckpt_choice")
    assert not picker.disabled
    at.sidebar.file_uploader[0].set_value(("random.pt", bytes(range(256)) * 8, "application/octet-stream")).run()
    no_exception(at)
    errors = [e.value for e in at.error]
    assert any("random.pt" in e and "not a PyTorch checkpoint" in e for e in errors), errors
    assert not any(".uploads" in e for e in errors), errors
    assert at.sidebar.selectbox(key="ckpt_choice").disabled
    assert any("Using your file **random.pt**" in c.value for c in at.sidebar.caption)
    at.sidebar.file_uploader[0].set_value(("good.pt", finished.best_ckpt.read_bytes(), "application/octet-stream"))
    at.run()
    no_exception(at)
    assert not at.error and any("two-way LSTM (BiLSTM), hidden 16" in c.value for c in at.sidebar.caption)
    at.sidebar.file_uploader[0].set_value(None).run()
    assert not at.sidebar.selectbox(key="ckpt_choice").disabled
    assert not any("Using your file" in c.value for c in at.sidebar.caption)


def active_copy(finished, runs_dir):
    """A copy of a finished run that reads as training: its status names this (live) test process."""
    run = copy_run(finished, runs_dir)
    status = json.loads(run.status_path.read_text())
    live = {"lr": 0.01, "grad_clip": 0.0, "epochs": 5, "augment": "off"}
    run.status_path.write_text(json.dumps(status | {
        "state": "running", "message": "epoch 1/5", "pid": os.getpid(), "host": socket.gethostname(),
        "heartbeat": time.time(), "live": live, "total_steps": 205, "step": 50, "pid_started": None}))
    return run, status


def test_a_live_value_out_of_range_is_caught_before_it_is_sent(dirs, finished):
    runs_dir, _ = dirs
    run, _ = active_copy(finished, runs_dir)
    at = fresh_session("pages/train.py")
    assert at.number_input(key="live_lr").value == 0.01
    at.number_input(key="live_lr").set_value(0.0).run()
    no_exception(at)
    assert any("lr" in e.value.lower() or "0.0" in e.value for e in at.error), [e.value for e in at.error]
    apply = next(b for b in at.button if b.label == "Apply")
    assert apply.disabled
    assert not run.control_path.exists() or not run.control_path.read_text().strip()  # nothing was sent
    assert any("Start training** queues a new run while this run is running" in c.value for c in at.caption)
    at.number_input(key="live_lr").set_value(0.002).run()
    assert not at.error and not next(b for b in at.button if b.label == "Apply").disabled


def test_what_was_sent_to_a_run_is_not_shown_after_it_ended(dirs, finished):
    runs_dir, _ = dirs
    run, ended = active_copy(finished, runs_dir)
    at = fresh_session("pages/train.py")
    next(b for b in at.button if b.label == "Stop").click().run()
    at.run()
    assert any("Stop" in c.value and "waiting for the worker" in c.value for c in at.caption)
    run.status_path.write_text(json.dumps(ended | {"state": "stopped", "message": "stopped at step 50"}))
    at.run()
    at.run()
    no_exception(at)
    assert not any("waiting for the worker" in c.value for c in at.caption)
    assert not at.session_state["pending"].get(run.id)


@pytest.mark.worker
def test_start_while_another_run_trains_queues_the_new_run_and_shows_it(dirs, finished):
    runs_dir, _ = dirs
    ended = copy_run(finished, runs_dir, "20261202-080000-mnist-sample-0001")
    busy, _ = active_copy(finished, runs_dir)
    slot = queue.try_take(runs_dir, "cpu")  # the busy run's device, held by its stand-in worker (this process)
    busy.write_status(slot="cpu")  # and recorded as its worker records it when its turn comes
    try:
        at = build_app()
        at.query_params["run"] = ended.id
        at.run()
        no_exception(at)
        assert at.sidebar.selectbox(key="run_picker").value == ended.id
        next(b for b in at.button if b.label == "Start training").click().run()
        no_exception(at)
        [new] = [r for r in list_runs(runs_dir) if r.id not in (ended.id, busy.id)]
        assert any(f"Queued {new.id} (" in i.value and f"behind run {busy.id}" in i.value for i in at.info), \
            [i.value for i in at.info]
        assert not at.success  # nothing started: not announced in green
        assert at.sidebar.selectbox(key="run_picker").value == new.id  # the page follows the queued run
        assert busy.status()["state"] == "running"
    finally:
        slot.release()
