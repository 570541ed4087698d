"""The Sweep page in a real browser: fill the form, start a 2-trial sweep, watch the table and plots fill.

Starts `streamlit run` on tmp folders (browser_helpers) and drives Debian's Chromium. The sweep is a
real one (embedded Ray, two tiny trials). Skipped without Chromium unless BRNN_REQUIRE_BROWSER=1.
The screenshot is docs/screenshots/sweep.png with BRNN_UPDATE_SCREENSHOTS=1 (the README's image).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal

import pytest
from browser_server import browser_page, require_browser, screenshot, start_server, stop_server
from helpers import REPO

from brnn_core.sweep.records import list_sweeps
from ui.common import picker_id

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    expect = sync_playwright = None

require_browser()

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.worker]
SHOTS = REPO / "test-output" / "screenshots"
T = 120_000  # ms
SWEEP_T = 600_000  # ms: Ray starts, two trials train, on two busy cores

PLOT_LINES_JS = """(kind) => {
    const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullData && p._fullData.length
        && p._fullData[0].type === kind);
    if (!plot) return -1;
    const d = plot._fullData;
    return kind === 'parcoords' ? d[0].dimensions[0].values.length : d.length;
}"""
if expect is not None:
    expect.set_options(timeout=T)
TABLE_TEXT_JS = "() => [...document.querySelectorAll('[data-testid=stDataFrame] td')].map(e => e.innerText)"


@pytest.fixture
def server(tmp_path):
    runs, data = tmp_path / "runs", tmp_path / "data"
    runs.mkdir()
    srv = start_server(runs, data, tmp_path / "server.log", env={"OMP_NUM_THREADS": "1"})
    try:
        yield srv, runs
    finally:
        stop_server(srv)
        for sweep in list_sweeps(runs):  # a failed test may leave its driver running: end its process group
            pid = sweep.raw().get("pid")
            if sweep.info().get("state") == "running" and pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pid), signal.SIGTERM)


@pytest.fixture
def page(server):
    with browser_page(SHOTS / "sweep-last-state.png", T) as pg:
        yield pg


def enter(field, value: str) -> None:
    field.fill(value)
    field.press("Enter")


def test_start_a_sweep_and_watch_it_fill(server, page):
    srv, runs = server
    page.goto(f"{srv.url}/sweep")
    expect(page.get_by_text("Sweep hyperparameters")).to_be_visible()
    page.get_by_text("Base settings").click()
    for label, value in (("Epochs", "2"), ("Hidden size", "8"), ("Recurrent layers", "1")):
        enter(page.get_by_label(label, exact=True), value)
        expect(page.get_by_label(label, exact=True)).to_have_value(value)
    spec = page.get_by_role("textbox", name="lr", exact=True)
    enter(spec, "loguniform:0:1")  # refused inline: lr cannot be 0
    expect(page.get_by_text(re.compile(r"lr: '0' is not a valid lr")).first).to_be_visible()
    expect(page.get_by_role("button", name="Start sweep")).to_be_disabled()
    enter(spec, "grid:0.01,0.003")
    expect(page.get_by_text("8 trials of lr grid:0.01,0.003").first).to_be_visible()  # 4 trials x the grid
    enter(page.get_by_label("Trials", exact=True), "1")
    expect(page.get_by_text("2 trials of lr grid:0.01,0.003; scheduler fifo").first).to_be_visible()
    page.get_by_role("button", name="Start sweep").click()
    expect(page.get_by_text(re.compile(r"Started sweep \S+")).first).to_be_visible()
    # live: the table gets both trials, the plots a line per trial, then both finish
    page.wait_for_function(f"() => ({TABLE_TEXT_JS})().filter(t => /^t0[01]$/.test(t)).length === 2",
                           timeout=SWEEP_T)
    page.wait_for_function(f"() => ({PLOT_LINES_JS})('parcoords') === 2", timeout=SWEEP_T)
    page.wait_for_function(f"() => ({PLOT_LINES_JS})('scatter') === 2", timeout=T)
    expect(page.get_by_text(re.compile(r"2 of 2 trials started · 2 finished"))).to_be_visible(timeout=SWEEP_T)
    page.wait_for_function(f"() => ({TABLE_TEXT_JS})().filter(t => t === 'finished').length === 2")
    cells = page.evaluate(TABLE_TEXT_JS)
    assert "0.01" in cells and "0.003" in cells, cells
    sweep = list_sweeps(runs)[0]
    assert sweep.info()["state"] == "finished"
    expect(page.get_by_text(re.compile(r"^Best: trial t0[01] · val_loss \d\.\d{4} at epoch 2"))).to_be_visible()
    page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTo(0, 0)")
    screenshot(page, "sweep", SHOTS)
    # a reload keeps the view (the sweep id is in the URL)
    page.reload()
    expect(page.get_by_text(re.compile(r"2 of 2 trials started · 2 finished"))).to_be_visible()
    page.get_by_role("button", name="Open best in Predict").click()
    expect(page.get_by_text("Draw a digit").first).to_be_visible()
    best = sweep.info()["best"]["run_id"]
    picker = page.get_by_role("combobox", name="Run checkpoint")
    expect(picker).to_have_value(re.compile("^" + re.escape(f"{picker_id(best)} · best · ")))
