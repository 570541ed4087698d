"""Predict page, headless with Streamlit's AppTest (AppTest cannot draw: the browser test does)."""

from __future__ import annotations

from helpers import copy_run, no_exception, open_page, rerun_until, save_rendered
from streamlit.testing.v1 import AppTest

from brnn_core.config import TrainConfig
from brnn_core.inference.scores import checkpoint_accuracy
from brnn_core.runs.rundir import create_run, new_run_config
from ui.common import picker_id, short_id


def predict_page() -> AppTest:
    return open_page("pages/predict.py", "Draw a digit")


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
    # Options show short labels, the value is the checkpoint's path (a label changes when a score appears);
    # the picked one is described in full under the picker.
    assert picker.options[picker.index].startswith(f"{picker_id(run.id)} · best · ")  # best first
    assert any(c.value.startswith(f"{short_id(run.id)} · best.pt · val acc ") for c in at.sidebar.caption)
    assert picker.value == str(run.best_ckpt)
    assert any(option.startswith(f"{picker_id(run.id)} · last") for option in picker.options)
    assert any("two-way LSTM (BiLSTM), hidden 16, 2 layers, head bidir, 10 classes" in c.value
               for c in at.sidebar.caption)
    assert any("Draw a digit on the canvas" in i.value for i in at.info)  # nothing drawn yet
    # Switching to last.pt loads it without trouble.
    picker.select(str(run.last_ckpt)).run()
    no_exception(at)
    assert at.sidebar.selectbox(key="ckpt_choice").value == str(run.last_ckpt)


def test_the_default_is_the_runs_best_pt_where_its_last_pt_scored_a_higher_accuracy(dirs, finished):
    """Only best.pt is calibrated when a run ends: a default last.pt would read "(uncalibrated)" to a newcomer."""
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    val = run.metrics().query("split == 'val'").iloc[-1]  # one more epoch: every digit right, at a worse loss
    run.log_metric(step=int(val["step"]) + 1, epoch=float(val["epoch"]) + 1, split="val", loss=float(val["loss"]) + 1,
                   accuracy=1.0, lr=float(val["lr"]), elapsed_s=float(val["elapsed_s"]) + 1)
    picker = predict_page().sidebar.selectbox(key="ckpt_choice")
    assert picker.value == str(run.best_ckpt), picker.options
    assert picker.options[picker.index + 1] == f"{picker_id(run.id)} · last · 100.0%", picker.options


def test_a_gru_checkpoint_is_named_as_the_network_it_is(dirs, gru_one_way):
    runs_dir, _ = dirs
    copy_run(gru_one_way, runs_dir)
    at = predict_page()
    no_exception(at)
    assert any("one-way GRU, hidden 8, 2 layers, head last, 10 classes" in c.value for c in at.sidebar.caption)
    assert not any("LSTM" in c.value for c in at.sidebar.caption)


def test_damaged_checkpoint_shows_an_error_not_a_traceback(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    run.last_ckpt.unlink()
    run.best_ckpt.write_bytes(b"not a checkpoint at all")
    at = predict_page()
    assert any("cannot be used" in e.value for e in at.error)


# ------------------------------------------------------------------ my drawings
def test_no_drawings_yet_says_how_to_save_one(dirs, finished):
    runs_dir, _ = dirs
    copy_run(finished, runs_dir)
    at = predict_page()
    assert any(s.value == "Teach it your handwriting" for s in at.subheader)
    assert any("No saved drawings yet: draw a digit, then click its true label" in c.value for c in at.caption)
    assert not [b for b in at.button if b.label.isdigit()]  # nothing drawn: no save buttons yet


def test_saved_drawings_are_listed_scored_and_deletable(dirs, finished, sample):
    runs_dir, data_dir = dirs
    run = copy_run(finished, runs_dir)
    saved = save_rendered(data_dir, sample, 12)
    at = predict_page()
    acc, n, _ = checkpoint_accuracy(run.best_ckpt, data_dir)
    label = f" · my drawings {100 * acc:.0f}% (12)"
    rerun_until(at, lambda a: any(c.value.endswith(label) for c in a.sidebar.caption), "the best.pt score")
    picker = at.sidebar.selectbox(key="ckpt_choice")
    held = sum(d.held_out for d in saved)
    assert any(c.value.startswith(f"12 saved drawings for these classes ({held} held out for validation)")
               for c in at.caption)
    deletes = [b for b in at.button if b.label == "Delete"]
    assert len(deletes) == 12
    # Pick last.pt, then delete the newest drawing: the choice survives its label changing (12 -> 11).
    picker.select(str(run.last_ckpt)).run()
    next(b for b in at.button if b.key == f"del_{saved[-1].id}").click().run()
    no_exception(at)
    assert not saved[-1].meta_path.exists() and saved[0].meta_path.exists()
    assert any(c.value.startswith("11 saved drawings") for c in at.caption)
    rerun_until(at, lambda a: any(c.value.endswith("(11)") for c in a.sidebar.caption),
                "last.pt scored on the 11 drawings left")
    picker = at.sidebar.selectbox(key="ckpt_choice")
    assert picker.value == str(run.last_ckpt)


def test_a_damaged_drawing_file_is_a_warning_not_a_crash(dirs, finished, sample):
    runs_dir, data_dir = dirs
    copy_run(finished, runs_dir)
    saved = save_rendered(data_dir, sample, 2)
    saved[0].meta_path.write_text("{broken")
    at = predict_page()
    assert any(f"skipped {saved[0].id}.json: not valid JSON" in w.value for w in at.warning)
    assert any(c.value.startswith("1 saved drawing for these classes") for c in at.caption)
