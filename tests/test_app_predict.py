"""Predict page, headless with Streamlit's AppTest (AppTest cannot draw: the browser test does)."""

from __future__ import annotations

from helpers import APP, copy_run
from streamlit.testing.v1 import AppTest

from brnn_core.config import TrainConfig
from brnn_core.jobs import new_run_config
from brnn_core.runs import create_run
from ui.common import short_id

TIMEOUT = 90


def predict_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/predict.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Draw a digit"
    return at


def test_no_runs_asks_to_train_first(dirs):
    at = predict_page()
    assert any("No checkpoint yet" in i.value and "Train" in i.value for i in at.info)
    assert not [s for s in at.sidebar.selectbox if s.label == "Run checkpoint"]


def test_runs_without_checkpoints_ask_to_train_first(dirs):
    runs_dir, data_dir = dirs
    create_run(runs_dir, new_run_config(TrainConfig(), data_dir))  # queued, nothing saved yet
    at = predict_page()
    assert any("No checkpoint yet" in i.value for i in at.info)


def test_checkpoint_picker_lists_best_and_last(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    at = predict_page()
    picker = at.sidebar.selectbox(key="ckpt_choice")
    assert picker.label == "Run checkpoint"
    assert picker.value.startswith(f"{short_id(run.id)} · best · val acc ")  # best first, with its accuracy
    assert any(option.startswith(f"{short_id(run.id)} · last") for option in picker.options)
    assert any("BiLSTM hidden 16, 2 layers, head bidir, 10 classes" in c.value for c in at.sidebar.caption)
    assert any("Draw a digit on the canvas" in i.value for i in at.info)  # nothing drawn yet
    # Switching to last.pt loads it without trouble.
    picker.select(next(o for o in picker.options if "· last" in o)).run()
    assert not at.exception


def test_damaged_checkpoint_shows_an_error_not_a_traceback(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    run.last_ckpt.unlink()
    run.best_ckpt.write_bytes(b"not a checkpoint at all")
    at = predict_page()
    assert any("cannot be used" in e.value for e in at.error)
