"""The "Branch from here" form, headless with AppTest: on the Runs page (a real worker trains the branch)
and on the Train page for an ended run."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest
from helpers import STEPS_PER_EPOCH as SPE  # the `finished` run trained one epoch
from helpers import build_app, copy_run, no_exception, wait_for_state
from streamlit.testing.v1 import AppTest

from brnn_core.checkpoint import load_checkpoint
from brnn_core.runs.rundir import list_runs


def page(name: str) -> AppTest:
    at = build_app()
    at.run()
    at.switch_page(name).run()
    no_exception(at)
    return at


def chart_layout(at: AppTest, key: str) -> dict:
    chart = next(c for c in at.get("plotly_chart") if c.key == key)
    return json.loads(chart.proto.spec)["layout"]


@pytest.mark.worker
def test_branch_from_the_runs_page_starts_it_and_overlays_it_with_its_parent(dirs, finished):
    runs_dir, _ = dirs
    parent = copy_run(finished, runs_dir)
    at = page("pages/runs.py")
    assert any(e.label == "Branch from here" for e in at.expander)
    kind = at.radio(key=f"runs_branch_{parent.id}_kind")
    assert kind.options == ["last.pt", "best.pt"] and kind.value == "last"
    assert list(kind.proto.captions) == [f"epoch 1, step {SPE}", f"epoch 1, step {SPE}"]
    prefix = f"runs_branch_{parent.id}_last"
    assert at.number_input(key=f"{prefix}_lr").value == pytest.approx(0.01)
    assert at.number_input(key=f"{prefix}_epochs").value == 2  # the checkpoint is at epoch 1 of 1: one more
    at.number_input(key=f"{prefix}_lr").set_value(0.003)
    at.button(key=f"runs_branch_{parent.id}_go").click().run()
    no_exception(at)
    child = next(r for r in list_runs(runs_dir) if r.id != parent.id)
    assert any(f"Started branch {child.id} from {parent.id}'s last.pt (step {SPE})" in s.value for s in at.success)
    assert child.config()["parent"] == {"run_id": parent.id, "checkpoint": "last", "step": SPE, "epoch": 1}
    assert at.selectbox(key="inspect").value == child.id  # the new branch is the one inspected
    assert at.query_params.get("run") in (child.id, [child.id])  # and the current run on the Train page

    status = wait_for_state(child, ("finished", "failed", "interrupted"), timeout=300)
    assert status["state"] == "finished", (child.path / "worker.log").read_text()[-2000:]
    m = child.metrics()
    assert m[m.split == "train"].step.min() > SPE and (m[m.split == "train"].lr == 0.003).all()
    assert load_checkpoint(child.last_ckpt).optimizer_state["param_groups"][0]["lr"] == 0.003

    at.run()  # both runs have data now: the overlay draws them on one step axis, the branch point marked
    no_exception(at)
    table = at.dataframe(key="runs_table").value
    assert dict(zip(table["run_id"], table["parent"], strict=True))[child.id] == parent.id
    layout = chart_layout(at, "cmp_train")
    assert [(s["x0"], s["line"]["dash"]) for s in layout["shapes"]] == [(SPE, "dash")]
    assert any(f"← {parent.id.rsplit('-', 1)[-1]}:last @ step {SPE}" in a["text"] for a in layout["annotations"])
    assert [s["x0"] for s in chart_layout(at, "cmp_val")["shapes"]] == [1]


def test_a_refused_branch_says_why_and_creates_nothing(dirs, finished):
    runs_dir, _ = dirs
    parent = copy_run(finished, runs_dir)
    parent.last_ckpt.unlink()  # only best.pt is left: the form offers it alone
    at = page("pages/runs.py")
    assert at.radio(key=f"runs_branch_{parent.id}_kind").options == ["best.pt"]
    assert any("fresh optimizer state" in c.value for c in at.caption)
    parent.best_ckpt.unlink()  # gone between drawing the form and clicking it
    at.button(key=f"runs_branch_{parent.id}_go").click().run()
    no_exception(at)
    assert any(f"Not branched: run {parent.id} has no best.pt" in e.value for e in at.error)
    assert [r.id for r in list_runs(runs_dir)] == [parent.id]


def test_a_damaged_checkpoint_is_named_and_the_other_still_offered(dirs, finished):
    runs_dir, _ = dirs
    parent = copy_run(finished, runs_dir)
    parent.best_ckpt.write_bytes(b"not a checkpoint")
    at = page("pages/runs.py")
    assert at.radio(key=f"runs_branch_{parent.id}_kind").options == ["last.pt"]
    assert any(c.value.startswith("best.pt cannot be branched from:") and "not a" in c.value for c in at.caption)


def test_the_train_page_offers_a_branch_for_an_ended_run_only(dirs, finished):
    runs_dir, _ = dirs
    parent = copy_run(finished, runs_dir)
    at = page("pages/train.py")
    assert any(e.label == "Branch from here" for e in at.expander)
    assert not at.button(key=f"train_branch_{parent.id}_go").disabled
    assert at.selectbox(key=f"train_branch_{parent.id}_last_optimizer").value == "adam"
    # A live process stands in for the worker, so the run is active (not this one: teardown kills "workers").
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        parent.write_status(state="running", pid=stand_in.pid,
                            pid_started=psutil.Process(stand_in.pid).create_time())
        at.run()
        no_exception(at)
        assert not any(e.label == "Branch from here" for e in at.expander)
        assert any(n.key == "live_lr" for n in at.number_input)  # the live controls take its place
    finally:
        stand_in.kill()
        stand_in.wait()
