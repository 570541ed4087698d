"""Sweep page, headless with Streamlit's AppTest: the form's inline checks, Stop and Continue sweep, a finished
sweep's view.

A real tiny sweep started from the CLI is stopped and continued through the page, which must then show it as it
shows any sweep started from a terminal.
"""

from __future__ import annotations

import json

import psutil
import pytest
from helpers import build_app, no_exception, tail, wait_for
from streamlit.testing.v1 import AppTest
from sweep_helpers import TINY, finish, sweep_process, trial_runs, val_rows, written_sweep

from brnn_core.sweep.records import list_sweeps


def app(runs_dir, data_dir, monkeypatch) -> AppTest:
    monkeypatch.setenv("BRNN_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("BRNN_DATA_DIR", str(data_dir))
    return build_app("pages/sweep.py").run()


def start_button(at: AppTest):
    return next(b for b in at.button if b.label == "Start sweep")


def test_the_trials_table_fits_its_run_ids_and_leaves_missing_values_blank(tmp_path, monkeypatch):
    """The table's widths are set, not measured from its first rows: a sweep's table is first drawn empty (cutting
    every run id that arrives later to '2026120'); a trial before its first epoch has no score: blank, not None."""
    runs, data = tmp_path / "runs", tmp_path / "data"
    sweep_id = written_sweep(runs, data)
    at = app(runs, data, monkeypatch)
    no_exception(at)
    (trials,) = [d for d in at.dataframe if "trial" in d.value.columns]
    table = trials.value
    assert table["best val_loss"].isna().sum() == 2  # the running and the queued trial
    assert trials.proto.placeholder == ""
    columns = json.loads(trials.proto.columns)
    longest = max(len(rid) for rid in table["run_id"])
    assert longest >= len(sweep_id) and columns["run_id"].get("width", 0) >= 7 * longest + 20, columns["run_id"]
    assert columns["state"].get("width", 0) >= 7 * len("interrupted") + 20, columns["state"]


def test_empty_page_offers_a_valid_default_sweep(tmp_path, monkeypatch):
    at = app(tmp_path / "runs", tmp_path / "data", monkeypatch)
    no_exception(at)
    assert at.title[0].value == "Sweep hyperparameters"
    assert any("No sweep yet" in i.value for i in at.info)
    assert at.multiselect(key="sw_fields").value == ["lr"]
    assert at.text_input(key="sw_spec_lr").value == "loguniform:0.0003:0.03"
    assert any("4 trials of lr loguniform:0.0003:0.03; scheduler fifo" in c.value for c in at.caption)
    assert not start_button(at).disabled


def test_bad_specs_and_plans_are_shown_inline(tmp_path, monkeypatch):
    import torch

    at = app(tmp_path / "runs", tmp_path / "data", monkeypatch)
    at.text_input(key="sw_spec_lr").set_value("loguniform:0:0.1").run()
    assert any("lr" in e.value and "out of range" in e.value for e in at.error), [e.value for e in at.error]
    assert start_button(at).disabled
    at.text_input(key="sw_spec_lr").set_value("grid:0.01,0.001").run()
    at.multiselect(key="sw_fields").set_value(["lr", "hidden_size"]).run()
    at.selectbox(key="sw_scheduler").set_value("pbt").run()
    assert any("hidden_size with --scheduler pbt" in e.value for e in at.error), [e.value for e in at.error]
    assert start_button(at).disabled
    at.selectbox(key="sw_scheduler").set_value("asha").run()
    assert not at.error and not start_button(at).disabled
    assert any("8 trials of lr grid:0.01,0.001, hidden_size choice:32,64,128; scheduler asha" in c.value
               for c in at.caption), [c.value for c in at.caption]
    # ASHA's options and the budget: checked as the CLI checks them, shown in the plan's line
    at.number_input(key="sw_grace").set_value(2).run()  # the base trains 2 epochs: nothing left to stop at
    assert any("--grace-period 2: between 1 and epochs - 1 (1)" in e.value for e in at.error), \
        [e.value for e in at.error]
    assert start_button(at).disabled
    at.number_input(key="sw_epochs").set_value(6).run()
    at.number_input(key="sw_reduction").set_value(3).run()
    at.number_input(key="sw_budget").set_value(30.0).run()
    assert not at.error and not start_button(at).disabled
    assert any("scheduler asha (grace period 2, reduction factor 3) on val_loss; time budget 30 min" in c.value
               for c in at.caption), [c.value for c in at.caption]
    if not torch.cuda.is_available():
        at.number_input(key="sw_gpus").set_value(0.5).run()
        assert any("no CUDA GPU" in e.value for e in at.error)
    assert not list((tmp_path / "runs").glob("sweeps/*"))  # checking creates nothing


def test_a_cli_sweep_stopped_and_continued_on_the_page_then_shown_like_any_sweep(tmp_path, monkeypatch):
    """A sweep started from a terminal, on the page: Stop sweep stops it (last.pt kept), Continue sweep trains its
    trials on to their end in the background, and then the page shows it as any finished sweep."""
    runs, data, log = tmp_path / "runs", tmp_path / "data", tmp_path / "sweep.log"
    with sweep_process([*TINY, "--set", "epochs=8", "--search", "lr=grid:0.01,0.003"], runs, data, log) as proc:
        wait_for(lambda: list_sweeps(runs) and any(r.status().get("step") for r in list_sweeps(runs)[0].trial_runs()),
                 600, f"the sweep's trials to train:\n{tail(log)}")
        at = app(runs, data, monkeypatch)
        stop = next(b for b in at.button if b.label == "Stop sweep")
        assert not stop.disabled
        stop.click().run()
        assert any("Stopping the sweep" in i.value for i in at.info)
        code, out = finish(proc, log)
    assert code == 0, out
    sweep = list_sweeps(runs)[0]
    assert sweep.info()["state"] == "stopped"
    assert '"source": "dashboard"' in sweep.control_path.read_text()
    for run in sweep.trial_runs():
        assert run.status()["state"] == "stopped" and run.last_ckpt.is_file()
    # Continue sweep: `sweep --resume` in the background; the stopped trials train on to their end
    at.run()
    buttons = {b.label: b.disabled for b in at.button}
    assert "Stop sweep" not in buttons and buttons["Continue sweep"] is False, buttons
    next(b for b in at.button if b.label == "Continue sweep").click().run()
    no_exception(at)
    assert any("Continuing" in i.value for i in at.info), [i.value for i in at.info]
    assert next(b for b in at.button if b.label == "Continue sweep").disabled  # one driver at a time
    wait_for(lambda: sweep.info()["state"] == "finished", 600, f"the continued sweep:\n{tail(sweep.log_path)}")
    psutil.Process(sweep.info()["pid"]).wait(timeout=120)  # the continuing driver ends with its sweep
    for run in sweep.trial_runs():
        assert run.status()["state"] == "finished" and list(val_rows(run)["epoch"]) == list(range(1, 9))
    # the finished sweep as a page opened now shows it: its trials, the plots, its best in Predict
    at = app(runs, data, monkeypatch)
    no_exception(at)
    assert at.selectbox(key="sweep_pick").value == sweep.id
    assert any("finished" in m.value and sweep.id in m.value for m in at.markdown)
    best = sweep.info()["best"]
    assert any(f"val_loss {best['value']:.4f}" in m.value for m in at.markdown)
    table = at.dataframe[0].value
    assert list(table["trial"]) == ["t00", "t01"] and list(table["state"]) == ["finished", "finished"]
    assert list(table["lr"]) == [0.01, 0.003]
    losses = {t: float(val_rows(r)["loss"].min()) for t, r in trial_runs(sweep).items()}
    assert list(table["best val_loss"]) == pytest.approx([losses["t00"], losses["t01"]])
    specs = {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
             for c in at.get("plotly_chart")}
    par = next(v for k, v in specs.items() if k.startswith("Searched fields"))["data"][0]
    assert par["type"] == "parcoords" and len(par["dimensions"]) == 2
    assert par["dimensions"][1]["values"] == pytest.approx([losses["t00"], losses["t01"]])
    curves = next(v for k, v in specs.items() if k.startswith("val_loss of every trial"))["data"]
    assert [c["name"] for c in curves] == ["t00", "t01"]
    buttons = {b.label: b.disabled for b in at.button}
    assert buttons["Stop sweep"] and not buttons["Open best in Predict"]
    # Open best in Predict: the Predict page then has the best trial's best.pt selected
    next(b for b in at.button if b.label == "Open best in Predict").click().run()
    no_exception(at)
    if at.title[0].value != "Draw a digit":  # AppTest may not follow st.switch_page; a browser does
        assert at.session_state["predict_checkpoint"] == str(runs / best["run_id"] / "checkpoints" / "best.pt")
        at.switch_page("pages/predict.py").run()
    assert at.title[0].value == "Draw a digit"
    assert at.selectbox(key="ckpt_choice").value == str(runs / best["run_id"] / "checkpoints" / "best.pt")


def test_train_with_these_settings_fills_the_train_page(dirs):
    """The best trial's best-config.json becomes the Train page's form, widgets included."""
    from benchmarks.sweep_page import SWEEP_ID, make_sweep

    runs_dir, _ = dirs
    make_sweep(runs_dir, 3)
    (runs_dir / "sweeps" / SWEEP_ID / "best-config.json").write_text(json.dumps(
        {"dataset": "mnist-sample", "lr": 0.0042, "hidden_size": 64, "epochs": 3, "lr_schedule": "constant"}))
    at = build_app()
    at.run()
    at.switch_page("pages/sweep.py").run()
    no_exception(at)
    next(b for b in at.button if b.label == "Train with these settings").click().run()
    no_exception(at)
    assert at.title[0].value == "Train a recurrent network"  # the button went to the Train page
    form = at.session_state["form"]
    assert (form["lr"], form["hidden_size"], form["epochs"], form["lr_schedule"]) == (0.0042, 64, 3, "constant")
    assert at.number_input(key="w_lr").value == 0.0042 and at.number_input(key="w_hidden_size").value == 64
    assert f"Filled in from sweep {SWEEP_ID}'s best trial: check them, then **Start training**." \
        in [i.value for i in at.info]  # said where the settings came from
