"""The Python API for notebooks (brnn_core.notebook, exported lazily by brnn_core): `start`/`train` through the
dashboard's front door (JobRegistry: a real worker process per run, in the one queue), a handle's live controls
answered by that worker, its metrics, figure and progress bar; bad values refused before anything is sent.

The worker tests train TINY runs on mnist-sample written as IDX (`idx_data`: workers load it in milliseconds).
docs/notebook.ipynb, executed start to finish, is test_notebook_example.py.
"""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import plotly.graph_objects as go
import pytest
from helpers import REPO, TINY, fake_finished_run, kill_workers, make_run, worker_environ

import brnn_core
from brnn_core.config import ConfigError
from brnn_core.runs.rundir import RunError, list_runs

# TINY on the IDX copy of mnist-sample, without pen-stroke copies: 8 steps an epoch, a metrics row and a status
# write each step, a constant lr (a live lr is the lr of the next step)
FAST = {**TINY, "dataset": "mnist", "drawn_share": 0.0}


@pytest.fixture
def folders(tmp_path, idx_data, monkeypatch):
    """(runs folder, data folder) for runs whose workers train on one thread offline; ended at teardown."""
    runs_dir = tmp_path / "runs"
    with worker_environ(monkeypatch):
        yield runs_dir, idx_data
    kill_workers(runs_dir)


# ------------------------------------------------------------------ refused before anything is sent or created
def test_importing_brnn_core_loads_neither_torch_nor_streamlit_until_the_api_is_used():
    # a process of its own: this one has imported streamlit for other tests
    code = ("import sys, brnn_core; print(sorted({'torch', 'streamlit', 'pandas'} & set(sys.modules)))\n"
            "assert brnn_core.start.__module__ == 'brnn_core.notebook'; print('streamlit' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "[]\nFalse\n"), done.stderr
    assert {"start", "train", "run", "RunHandle"} <= set(dir(brnn_core))


@pytest.mark.parametrize(("changes", "said"), [
    ({"lr": -1}, "lr=-1: -1.0 is out of range; allowed 1e-07 to 10"),
    ({"lr": 0.001, "grad_clip": -2}, "grad_clip=-2: "),
    ({"epochs": 0}, "epochs=0: 0 (auto) is for a new run; give the total number of epochs, at least 1"),
    ({"augment": "extreme"}, "augment='extreme': 'extreme' is not one of"),
    ({"hidden_size": 32}, "hidden_size cannot change while a run trains; only lr, grad_clip, epochs, augment can"),
])
def test_a_bad_live_value_raises_naming_the_fix_and_nothing_is_sent(runs_dir, changes, said):
    run = make_run(runs_dir, base=TINY)  # queued, as a run just started: the worker would apply what is sent
    handle = brnn_core.run(run.id, runs_dir=runs_dir)
    with pytest.raises(ValueError) as raised:
        handle.set(**changes)
    assert said in str(raised.value)
    with pytest.raises(ValueError) as raised:
        handle.resume(**changes)
    assert said in str(raised.value)
    assert run.control_path.read_text() == ""


def test_a_bad_config_starts_nothing(runs_dir, data_dir):
    with pytest.raises(ConfigError, match="lr: -1.0 is out of range"):
        brnn_core.start({"lr": -1}, runs_dir=runs_dir, data_dir=data_dir)
    with pytest.raises(ConfigError, match="hiden_size: unknown field"):
        brnn_core.start(runs_dir=runs_dir, data_dir=data_dir, hiden_size=8)
    with pytest.raises(TypeError, match="config takes a TrainConfig, a dict of its fields or None, not str"):
        brnn_core.start("lr=0.1", runs_dir=runs_dir, data_dir=data_dir)
    assert list_runs(runs_dir) == []


def test_an_ended_run_is_opened_by_id_or_folder_and_refuses_live_controls(runs_dir):
    run = fake_finished_run(runs_dir)
    by_id, by_path = brnn_core.run(run.id, runs_dir=runs_dir), brnn_core.run(run.path)
    assert (by_id.id, by_id.path) == (by_path.id, by_path.path) == (run.id, run.path)
    assert by_id.status().state == "finished" and by_id.status()["step"] == 8
    pd.testing.assert_frame_equal(by_path.metrics(), run.metrics())
    for control in (by_id.pause, by_id.stop, lambda: by_id.set(lr=0.001)):
        with pytest.raises(RunError, match=f"run {run.id} has ended \\(finished\\): nothing to"):
            control()
    with pytest.raises(RunError, match="no run 'nope'"):
        brnn_core.run("nope", runs_dir=runs_dir)
    assert run.control_path.read_text() == ""


# ------------------------------------------------------------------ a real worker
@pytest.mark.worker
@pytest.mark.slow  # two worker starts
def test_train_then_resume_pause_set_resume_stop_through_the_front_door(folders, capsys):
    runs_dir, data_dir = folders
    handle = brnn_core.train(FAST, epochs=1, runs_dir=runs_dir, data_dir=data_dir)
    assert isinstance(handle, brnn_core.RunHandle) and handle.path.parent == runs_dir
    finished = handle.status()
    assert finished.state == "finished", finished.to_dict()
    bar = capsys.readouterr().err  # tqdm's text bar, ending on how the run ended
    assert handle.id in bar and "100%" in bar and bar.rstrip().endswith(finished["message"])
    train = handle.metrics().query("split == 'train'")
    assert list(train["step"]) == list(range(1, 9)) and set(handle.metrics()["split"]) == {"train", "val", "test"}
    figure = handle.figure()
    assert isinstance(figure, go.Figure) and list(figure.data[0].x) == list(train["step"])
    assert list(figure.data[0].y) == pytest.approx(list(train["loss"]))

    assert handle.resume(epochs=1000).result == "done"  # the Resume button's way: the registry, a new worker
    rows = len(handle.metrics())
    handle.wait(until_step=11, progress=False, timeout=180)
    assert len(handle.metrics()) > rows  # the DataFrame grows while it trains
    with pytest.raises(TimeoutError, match="still running after 0.1 s; it goes on training"):
        handle.wait(timeout=0.1, progress=False)

    paused = handle.pause()
    assert (paused.label, paused.result) == ("Pause", "done") and paused.message.startswith("paused at step ")
    step = int(paused.message.rsplit(" ", 1)[1])
    assert handle.status().state == "paused" and handle.status().step == step
    sent = handle.path.joinpath("control.jsonl").read_text()
    with pytest.raises(ValueError, match="lr=-1: -1.0 is out of range; allowed 1e-07 to 10"):
        handle.set(lr=-1)
    assert handle.path.joinpath("control.jsonl").read_text() == sent  # refused before anything was sent
    [changed] = handle.set(lr=0.001)
    assert (changed.label, changed.result, changed.message) == ("lr → 0.001", "applied",
                                                                f"lr 0.01 -> 0.001 at step {step}")
    assert handle.resume().message == f"resumed at step {step}"
    handle.wait(until_step=step + 3, progress=False, timeout=120)
    assert handle.stop().message.startswith("stop requested at step ")
    ended = handle.wait(progress=False, timeout=120)
    assert ended.state == "stopped" and ended.step > step

    train = handle.metrics().query("split == 'train'")
    assert (train[train["step"] <= step]["lr"] == 0.01).all()
    assert len(train[train["step"] > step]) >= 3 and (train[train["step"] > step]["lr"] == 0.001).all()
    opened = brnn_core.run(handle.id, runs_dir=runs_dir)
    assert (opened.status().state, opened.status().step) == (ended.state, ended.step)
    assert repr(opened).startswith(f"<run {handle.id}: stopped, step {ended.step}")
