"""Train page (AppTest): the augmentation field in the form and in the live controls of a real worker."""

from __future__ import annotations

import pytest
from helpers import build_app, no_exception, wait_for, wait_for_state
from streamlit.testing.v1 import AppTest

from brnn_core.config import AUGMENT_AUTO, AUGMENT_LEVELS
from brnn_core.runs.rundir import list_runs


def app() -> AppTest:
    at = build_app().run()
    no_exception(at)
    return at


def test_form_offers_the_levels_and_says_what_auto_means_for_the_dataset(dirs):
    at = app()
    box = at.selectbox(key="w_augment")
    assert box.value == "auto" and not box.disabled
    assert box.options == [f"auto: {AUGMENT_AUTO['mnist-sample']} for this dataset", *AUGMENT_LEVELS[1:]]
    assert "never on validation or test" in box.help
    at.selectbox(key="w_dataset").select("fashion-mnist").run()
    assert at.selectbox(key="w_augment").options[0] == "auto: off for this dataset"


@pytest.mark.worker
@pytest.mark.slow
def test_live_augmentation_change_from_the_page_is_applied_and_acknowledged(dirs):
    runs_dir, _ = dirs
    at = app()
    at.number_input(key="w_hidden_size").set_value(8)
    at.number_input(key="w_epochs").set_value(500)  # long enough to catch it running; stopped below
    at.selectbox(key="w_augment").select("off")
    at.run()
    next(b for b in at.button if b.label == "Start training").click().run()
    [run] = list_runs(runs_dir)
    assert run.config()["train"]["augment"] == "off"
    wait_for_state(run, "running")
    at.run()
    assert at.selectbox(key="live_augment").value == "off"

    at.selectbox(key="live_augment").select("strong")
    next(b for b in at.button if b.label == "Apply").click().run()
    assert any("Sent: augment → strong" in t.value for t in at.toast)
    wait_for(lambda: any(e["kind"] == "set" for e in run.events()), 120, "the worker to apply augment", interval=0.2)
    at.run()
    acks = [s.value for s in at.success]
    assert any("augment → strong: applied, augment off -> strong at step" in a for a in acks), acks
    # the session logs the ack, then writes status.json: on a busy machine the page can read the ack first
    assert wait_for(lambda: run.status()["live"]["augment"] == "strong", 30, "live augment in status.json")
    next(b for b in at.button if b.label == "Stop").click().run()
    wait_for_state(run, "stopped")
