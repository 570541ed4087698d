"""A newcomer's path in a real browser at 1400 px, on one fresh server: train with the defaults, change the
lr live (a bad value is caught first), pause and resume; draw a 7 and see it read (the prediction, how the
two-way LSTM reads it), save drawings, Teach it until before -> after shows; the Runs page; a small sweep (a bad
spec refused inline, the table and plots filling live, a reload keeping the view), Train with these settings,
Open best in Predict; every page opened first in a new browser session; and a second person's run with the live
controls (charts growing, gradient flow, lr, pause, resume, Stop, reload). On each page no label may be cut off
(an ellipsis, or text clipped by its box).

Skipped without Chromium unless BRNN_REQUIRE_BROWSER=1. With BRNN_UPDATE_SCREENSHOTS=1 the shots named in the
README are copied to docs/screenshots/.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from browser_helpers import (
    PLOT_JS,
    TOP_CLASS_JS,
    draw_until,
    metric_value,
    open_expander,
    plot_info,
    wait_chart_points_above,
    wait_js,
    wait_step_above,
)
from browser_helpers import draw_stroke as draw
from browser_server import VIEWPORT, browser_page, require_browser, screenshot, start_server, stop_server
from helpers import REPO, kill_workers, wait_for_state
from PIL import Image

from brnn_core.runs.rundir import Run, list_runs
from brnn_core.sweep.records import list_sweeps
from ui.common import picker_id

try:
    from playwright.sync_api import expect
except ImportError:
    expect = None

require_browser()

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.worker]
SHOTS = REPO / "test-output" / "screenshots"
T = 120_000  # ms: anything visible
LONG = 900_000  # ms: the default run to its end, a sweep, on two busy cores
if expect is not None:
    expect.set_options(timeout=T)

PLOT_LINES_JS = """(kind) => {
    const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullData && p._fullData.length
        && p._fullData[0].type === kind);
    if (!plot) return -1;
    const d = plot._fullData;
    return kind === 'parcoords' ? d[0].dimensions[0].values.length : d.length;
}"""
TABLE_TEXT_JS = "() => [...document.querySelectorAll('[data-testid=stDataFrame] td')].map(e => e.innerText)"

# Visible elements with text of their own whose content is wider than their box while the box clips it
# (an ellipsis or hidden overflow): a label the user cannot read whole. Scrolling boxes (code) do not count.
CUT_JS = """() => {
    const cut = [];
    for (const el of document.querySelectorAll('[data-testid=stMain] *, [data-testid=stSidebar] *')) {
        // not shown: no layout box, or inside a closed expander (kept in the page, inert)
        if (!el.offsetParent || el.closest('[inert]')) continue;
        if (el.closest('.js-plotly-plot, [data-testid=stDataFrame], pre, code')) continue;
        if (el.tagName === 'INPUT' && el.type === 'file') continue;  // hidden behind the uploader's button
        if (el.tagName === 'INPUT' && el.type !== 'range') {  // a value wider than its field
            if (el.scrollWidth > el.clientWidth + 1) cut.push(`${el.getAttribute('aria-label')}: ${el.value}`);
            continue;
        }
        if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
        const cs = getComputedStyle(el);
        const clips = cs.textOverflow === 'ellipsis' || ['hidden', 'clip'].includes(cs.overflowX);
        if (clips && el.scrollWidth > el.clientWidth + 1) cut.push(el.textContent.trim().slice(0, 80));
    }
    return cut;
}"""


def no_cut_labels(page, where: str) -> None:
    page.wait_for_timeout(300)  # a rerun's last elements in place
    cut = page.evaluate(CUT_JS)
    assert not cut, f"{where}: labels cut off at {page.viewport_size['width']} px: {cut}"


def no_exception(page, where: str) -> None:
    errors = page.locator("[data-testid=stException]")
    assert errors.count() == 0, f"{where}: {errors.first.inner_text()[:500]}"


def enter(field, value: str) -> None:
    field.fill(value)
    field.press("Enter")


SEVEN = ([(60, 55), (220, 55)], [(220, 55), (170, 140), (125, 240)])
ONE = ([(140, 40), (140, 240)],)
SHAPES = {"7": SEVEN, "1": ONE, "0": ([(140, 40), (80, 90), (80, 190), (140, 240), (200, 190), (200, 90),
                                      (140, 40)],)}


def save_as(page, label: str) -> None:
    """Click the save button `label`. While a rerun redraws the page, Streamlit can show the previous run's row of
    buttons beside the new one for a moment (seen once in a full suite run): click once one row is left."""
    button = page.get_by_role("button", name=label, exact=True)
    expect(button).to_have_count(1)
    button.click()


def draw_and_save(page, strokes, label: str) -> None:
    """Draw on a fresh canvas until a prediction shows, then save it as `label`."""
    prediction = page.locator("[data-testid=stMetric]").filter(has_text="Prediction")
    draw_until(prediction, page, strokes)
    save_as(page, label)
    expect(page.get_by_text(re.compile(rf"^Saved as {label}")).first).to_be_visible()
    expect(prediction).to_have_count(0)  # a fresh canvas


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("newcomer")
    runs, data = root / "runs", root / "data"
    runs.mkdir()
    srv = start_server(runs, data, root / "server.log", env={"OMP_NUM_THREADS": "1"})
    try:
        yield srv, runs, data
    finally:
        stop_server(srv)
        kill_workers(runs)


@pytest.fixture(scope="module")
def page(server):
    with browser_page(SHOTS / "newcomer-last-state.png", T) as pg:
        yield pg


def test_train_with_the_defaults_live_lr_pause_and_resume(server, page):
    srv, runs, _ = server
    page.goto(srv.url)
    # a fresh server's first page loads PyTorch for seconds: it says so rather than staying blank
    expect(page.get_by_text("Starting up: loading PyTorch").first).to_be_visible()
    expect(page.get_by_role("button", name="Start training")).to_be_enabled()
    no_cut_labels(page, "Train, the form")
    page.get_by_role("button", name="Start training").click()
    # started, or queued behind the server's background drawing of the default dataset's digits
    expect(page.get_by_text(re.compile(r"Started run \S+|Queued \S+")).first).to_be_visible()
    wait_js(page, "() => /step [1-9]\\d*\\//.test(document.body.innerText)", timeout=T)
    (run,) = list_runs(runs)
    assert run.config()["train"]["epochs"] >= 10  # the offline sample's default leaves time to try things
    queues = re.compile(r"Start training\*?\*? queues a new run while this run is")
    expect(page.get_by_text(queues).first).to_be_visible()

    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_text(re.compile(r"paused at step \d+")).first).to_be_visible()
    progress = page.locator("[data-testid=stProgress]").first
    expect(progress).to_contain_text("paused")
    expect(progress).not_to_contain_text("ETA")  # no time left while nothing trains
    # opened, it stays open while events arrive and through the reruns that Apply and Resume make
    open_expander(page, "Event log")
    screenshot(page, "train-paused", SHOTS)

    live_lr = page.get_by_role("spinbutton", name="Peak learning rate")
    enter(live_lr, "0")  # caught before anything is sent
    expect(page.locator("[data-testid=stAlertContentError]").first).to_be_visible()
    expect(page.get_by_role("button", name="Apply")).to_be_disabled()
    enter(live_lr, "0.005")
    # and, as a newcomer who has seen enough, three epochs in all: the rest of the walk needs a model, not 20 epochs.
    # Sent while paused (the worker applies commands while it waits): on an idle machine an epoch of the sample takes
    # seconds at bf16, and a run cut to 3 epochs while it trains could end before a Pause sent after it lands.
    enter(page.get_by_role("spinbutton", name="Total epochs"), "3")
    expect(page.get_by_role("button", name="Apply")).to_be_enabled()
    no_cut_labels(page, "Train, live controls")
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text(re.compile(r"applied, lr 0\.01 (->|→) 0\.005 at step \d+")).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"applied, epochs \d+ (->|→) 3 at step \d+")).first).to_be_visible()
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_text(re.compile(r"resumed at step \d+")).first).to_be_visible()
    expect(page.locator("[data-testid=stExpanderDetails]").filter(has_text="resume").first).to_be_visible()
    screenshot(page, "train-running", SHOTS)

    # to its end: the page follows, and a finished run shows no ETA
    expect(page.locator("[data-testid=stMarkdown]").filter(has_text=run.id).filter(has_text="finished").first) \
        .to_be_visible(timeout=LONG)
    assert Run(run.path).status()["state"] == "finished"
    expect(page.locator("[data-testid=stProgress]").first).not_to_contain_text("ETA")
    no_exception(page, "Train, finished")
    no_cut_labels(page, "Train, finished")


def reads_the_drawn_seven(page) -> None:
    """The look at how the two-way LSTM reads the drawn 7: the row-by-row heatmap, the attribution overlay, what
    each direction drew on, in plain words."""
    from brnn_core.charts import ATTRIBUTION_TITLE, READING_TITLE

    expect(page.get_by_text("How the two-way LSTM (BiLSTM) reads your digit").first).to_be_visible()
    wait_js(page, f"() => ({PLOT_JS})({READING_TITLE!r}) && ({PLOT_JS})({ATTRIBUTION_TITLE!r})", timeout=T)
    reading = plot_info(page, READING_TITLE)
    # The 28x28 image and, beside it, 28 rows (one per image row) x 10 classes.
    assert reading == {"traces": ["heatmap", "heatmap"], "rows": [28, 28], "cols": [28, 10]}, reading
    overlay = plot_info(page, ATTRIBUTION_TITLE)
    assert overlay == {"traces": ["heatmap", "heatmap"], "rows": [28, 28], "cols": [28, 28]}, overlay
    expect(page.get_by_text(f"{ATTRIBUTION_TITLE}: 7").first).to_be_visible()
    wait_js(page, f"() => ({PLOT_JS})('What each direction drew on: 7')", timeout=T)
    readers = page.evaluate(f"""() => ({PLOT_JS})('What each direction drew on: 7')._fullData.map(
        d => [d.type, d.name, d.y.length])""")
    assert readers == [["bar", "forward reader", 28], ["bar", "backward reader", 28]], readers
    expect(page.get_by_text(re.compile("arXiv:1910.12370")).first).to_be_visible()  # the recency bias, in words
    expect(page.get_by_text(re.compile("one row of pixels at a time")).first).to_be_visible()  # plain words
    expect(page.get_by_text(re.compile("cuDNN"))).to_have_count(0)  # no GPU sentence on a CPU machine


def test_draw_save_and_teach_it_until_before_after_shows(server, page):
    srv, runs, data = server
    page.goto(f"{srv.url}/predict")
    expect(page.get_by_text("Draw a digit on the canvas to see what the model predicts.").first).to_be_visible()
    no_cut_labels(page, "Predict, empty")
    picker = page.get_by_role("combobox", name="Run checkpoint")
    expect(picker).to_have_value(re.compile(r" · (best|last) · \d+\.\d%$"))  # the higher val acc first
    for stroke in SEVEN:
        draw(page, stroke)
    expect(page.locator("[data-testid=stMetric]").filter(has_text="Prediction")).to_be_visible()
    # the page reruns with the whole drawing; the metric, the caption and the chart are redrawn one after the
    # other: wait until all three describe the finished 7
    wait_js(page, f"() => ({TOP_CLASS_JS})() === '7'", timeout=T)
    expect(metric_value(page, "Prediction")).to_have_text("7")
    chart_top = page.evaluate(f"() => Math.max(...Array.from(({PLOT_JS})('Class probabilities')._fullData[0].y))")
    caption = page.locator("[data-testid=stCaptionContainer]").filter(has_text="% probability").first
    expect(caption).to_have_text(re.compile(r"^\d+\.\d% probability$"))
    assert abs(float(caption.inner_text().split("%")[0]) - chart_top) <= 0.051, (caption.inner_text(), chart_top)
    expect(page.get_by_text("What the model sees (28×28)").first).to_be_visible()
    reads_the_drawn_seven(page)
    wait_js(page, "() => [...document.querySelectorAll('[data-testid=stImage] img')]"
            ".every(img => img.complete)", timeout=T)
    no_cut_labels(page, "Predict, a drawn 7")
    screenshot(page, "predict", SHOTS)
    expect(page.get_by_text("No saved drawings yet").first).to_be_visible()
    save_as(page, "7")
    expect(page.get_by_text(re.compile(r"^Saved as 7")).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"^1 saved drawing for these classes \(0 held out")).first).to_be_visible()
    expect(page.get_by_role("button", name="Delete")).to_have_count(1)
    expect(page.get_by_text("Draw a digit on the canvas to see what the model predicts.").first).to_be_visible()
    (meta,) = (data / "my-drawings").glob("*.json")
    assert '"label": 7' in meta.read_text()
    seen = np.asarray(Image.open(meta.with_name(meta.name.replace(".json", ".input.png"))))
    assert seen.shape == (28, 28) and seen.max() > 200 and (seen > 50).sum() > 40  # the 7's strokes, as the model saw
    draw(page, ONE[0])  # the next stroke: the note was about the drawing saved before
    expect(page.get_by_text(re.compile(r"^Saved as 7"))).to_have_count(0)
    save_as(page, "1")
    expect(page.get_by_text(re.compile(r"^Saved as 1")).first).to_be_visible()
    # ten drawings with a held-out one (each class's 3rd): before the click, the page says what it will show
    expect(page.get_by_text(re.compile(r"Before → after on your drawings needs a held-out one")).first) \
        .to_be_visible()
    for label in ("1", "0", "0", "0", "7", "7", "1", "0"):
        draw_and_save(page, SHAPES[label], label)
    expect(page.get_by_text(re.compile(r"shows before → after on the \d+ held out")).first).to_be_visible()
    screenshot(page, "predict-saved", SHOTS)
    before = picker.input_value()
    page.get_by_role("button", name="Teach it").click()
    result = page.get_by_text(re.compile(r"^Taught: now predicting with \S+'s best\.pt\. your \d+ held-out "
                                         r"drawings: \d+\.\d% → \d+\.\d%"))
    expect(result.first).to_be_visible(timeout=LONG)
    taught = next(r for r in list_runs(runs) if r.config()["train"].get("my_drawings"))
    expect(picker).not_to_have_value(before)
    expect(picker).to_have_value(re.compile(re.escape(f"{taught.id[9:11]}:{taught.id[11:13]}:{taught.id[13:15]}")))
    # the result stands beside the button, not at the top of the page
    teach = page.get_by_role("button", name="Teach it").bounding_box()
    shown = result.first.bounding_box()
    assert abs(shown["y"] - teach["y"]) < 300, (shown, teach)
    no_exception(page, "Predict, taught")
    no_cut_labels(page, "Predict, taught")


def test_inside_the_lstm_on_a_drawn_digit(server, page):
    srv, _, _ = server
    page.goto(f"{srv.url}/predict")
    prediction = page.locator("[data-testid=stMetric]").filter(has_text="Prediction")
    draw_until(prediction, page, list(SEVEN))
    open_expander(page, "Inside the two-way LSTM")
    expect(page.get_by_text("Rows that mattered").first).to_be_visible()
    direction = re.compile(r"At row t the forward direction (of the .+ )?has read rows 0\.\.t")
    expect(page.get_by_text(direction).first).to_be_visible()
    # the training digits' states are read once in the background; the next stroke shows the path
    expect(page.get_by_text("Where the digit goes").first).to_be_visible()
    deadline = 60
    for _ in range(deadline):
        if page.get_by_text("Nearest training digits").count():
            break
        draw(page, [(60, 55), (220, 55)])  # the same bar again: the same digit, a rerun
        page.wait_for_timeout(2000)
    expect(page.get_by_text("Nearest training digits").first).to_be_visible()
    expect(page.get_by_text("through state space").first).to_be_visible()
    page.get_by_text("Sanity check: the same for random weights").click()  # the switch's label
    expect(page.get_by_text(re.compile(r"^Correlation between the two maps")).first).to_be_visible(timeout=LONG)
    no_exception(page, "Predict, inside the LSTM")
    no_cut_labels(page, "Predict, inside the LSTM")
    screenshot(page, "predict-inside", SHOTS)


def test_runs_page_follows_and_fits(server, page):
    srv, runs, _ = server
    page.goto(f"{srv.url}/runs")
    expect(page.get_by_text("Inspect one run")).to_be_visible()
    expect(page.get_by_text("Confusion matrix (test set)").first).to_be_visible()
    expect(page.get_by_text(re.compile(r"most confident mistakes first\)")).first).to_be_visible()
    expect(metric_value(page, "Test accuracy")).to_have_text(re.compile(r"^\d+\.\d\d%$"))
    # The most confident mistakes, as images captioned "true 7 → 9 (88%)", once the test set is loaded.
    expect(page.get_by_text("Misclassified test images")).to_be_visible()
    expect(page.get_by_text(re.compile(r"^true \S+ → \S+ \(\d+%\)$")).first).to_be_visible()
    expect(page.get_by_text("Loading test images")).to_have_count(0)
    no_exception(page, "Runs")
    no_cut_labels(page, "Runs")
    screenshot(page, "runs", SHOTS)


def test_a_small_sweep_then_its_best_on_train_and_predict(server, page):
    """The Sweep page: a bad spec is refused inline, a 2-trial sweep (embedded Ray, tiny trials) fills the table and
    the plots live, a reload keeps the view, and its best opens in Train and in Predict."""
    srv, runs, _ = server
    page.goto(f"{srv.url}/sweep")
    expect(page.get_by_text("Sweep hyperparameters")).to_be_visible()
    no_cut_labels(page, "Sweep, the form")
    open_expander(page, "Resources")
    no_cut_labels(page, "Sweep, resources")
    open_expander(page, "Base settings")
    for label, value in (("Epochs", "1"), ("Hidden size", "8"), ("Recurrent layers", "1")):
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
    wait_js(page, f"() => ({TABLE_TEXT_JS})().filter(t => /^t0[01]$/.test(t)).length === 2", timeout=LONG)
    wait_js(page, f"() => ({PLOT_LINES_JS})('parcoords') === 2", timeout=LONG)
    wait_js(page, f"() => ({PLOT_LINES_JS})('scatter') === 2", timeout=T)
    expect(page.get_by_text(re.compile(r"2 of 2 trials started · 2 finished"))).to_be_visible(timeout=LONG)
    wait_js(page, f"() => ({TABLE_TEXT_JS})().filter(t => t === 'finished').length === 2")
    cells = page.evaluate(TABLE_TEXT_JS)
    assert "0.01" in cells and "0.003" in cells, cells
    sweep = list_sweeps(runs)[0]
    assert sweep.info()["state"] == "finished"
    expect(page.get_by_text(re.compile(r"^Best: trial t0[01] · val_loss \d\.\d{4} at epoch 1"))).to_be_visible()
    no_exception(page, "Sweep, finished")
    no_cut_labels(page, "Sweep, finished")
    page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTo(0, 0)")
    screenshot(page, "sweep", SHOTS)
    # a reload keeps the view (the sweep id is in the URL)
    page.reload()
    expect(page.get_by_text(re.compile(r"2 of 2 trials started · 2 finished"))).to_be_visible()
    best = Run(runs / sweep.info()["best"]["run_id"])

    page.get_by_role("button", name="Train with these settings").click()
    expect(page.get_by_role("heading", name="Train a recurrent network")).to_be_visible()
    no_exception(page, "Train with these settings")
    expect(page.get_by_role("spinbutton", name="Hidden size")).to_have_value("8")
    expect(page.get_by_role("spinbutton", name="Learning rate")).to_have_value(
        f"{best.config()['train']['lr']:.5f}")

    page.goto(f"{srv.url}/sweep")
    page.get_by_role("button", name="Open best in Predict").click()
    expect(page.get_by_text("Draw a digit").first).to_be_visible()
    picker = page.get_by_role("combobox", name="Run checkpoint")
    expect(picker).to_have_value(re.compile("^" + re.escape(f"{picker_id(best.id)} · best · ")))
    expect(page.get_by_text("two-way LSTM (BiLSTM), hidden 8, 1 layer,").first).to_be_visible()  # the one predicting


@pytest.mark.parametrize("path", ["/sweep", "/predict", "/runs", "/"])
def test_each_page_first_in_a_new_browser_session(server, page, path):
    """A second person (a new browser context: no session, no cookies) whose first page is `path`."""
    srv, _, _ = server
    context = page.context.browser.new_context(viewport=page.viewport_size)
    try:
        pg = context.new_page()
        pg.set_default_timeout(T)
        pg.goto(srv.url + path)
        expect(pg.locator("h1").first).to_be_visible(timeout=T)
        pg.wait_for_load_state("networkidle")
        no_exception(pg, path)
        no_cut_labels(pg, path)
    finally:
        context.close()


def test_train_with_live_controls(server, page):
    """A second person (a fresh session: the form at its defaults) trains the default network for 20 epochs with the
    live controls: the charts grow, the gradient flow through time is drawn, the lr changes live, pause, resume,
    and Stop keeps a checkpoint; a reload (the URL carries ?run=ID) shows the same run, stopped."""
    srv, runs, _ = server
    before = {r.id for r in list_runs(runs)}
    context = page.context.browser.new_context(viewport=VIEWPORT)
    try:
        pg = context.new_page()
        pg.set_default_timeout(T)
        pg.goto(srv.url)
        live_controls(pg, runs, before)
    finally:
        context.close()


def live_controls(page, runs, before: set[str]) -> None:
    lr_field = "Learning rate"
    epochs = page.get_by_role("spinbutton", name="Epochs")
    expect(epochs).to_be_enabled()
    expect(page.get_by_role("spinbutton", name="Hidden size")).to_have_value("128")
    # 20 epochs (820 steps): even on an idle machine the run outlives the live-control steps below, which
    # pause and stop it long before the end.
    enter(epochs, "20")
    page.get_by_role("button", name="Start training").click()

    # The worker starts, loads the data and logs: the progress text and the metrics fill in.
    expect(page.get_by_text(re.compile(r"Started run \S+|Queued \S+")).first).to_be_visible()
    first = wait_step_above(page, 0)
    expect(metric_value(page, "train loss")).to_have_text(re.compile(r"^\d+\.\d{4}$"))
    points = wait_chart_points_above(page, "Training loss (per step)", 0)
    later = wait_step_above(page, first)
    assert later > first
    assert wait_chart_points_above(page, "Training loss (per step)", points) > points  # the chart grows
    (run,) = [r for r in list_runs(runs) if r.id not in before]
    assert run.config()["train"]["epochs"] == 20
    expect(page.get_by_text(run.id).first).to_be_visible()
    wait_chart_points_above(page, "Training loss (per step)", 3)  # a curve worth a screenshot
    # The gradient flow through time: measured at step 0, drawn as a heatmap per direction of the picked layer (the
    # session's pick, here from the one-layer sweep trial the page showed first)
    wait_js(page, f"() => ({PLOT_JS})('Gradient flow through time · layer')", timeout=T)
    flow = plot_info(page, "Gradient flow through time · layer")
    assert flow["traces"] == ["heatmap", "heatmap"] and flow["cols"] == [28, 28] and min(flow["rows"]) >= 1, flow
    screenshot(page, "train-running", SHOTS)

    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_text(re.compile(r"paused at step \d+")).first).to_be_visible()
    wait_for_state(run, "paused")
    expect(page.get_by_role("button", name="Resume")).to_be_enabled()
    screenshot(page, "train-paused", SHOTS)

    # Live learning rate, applied while paused (a paused worker still reads its commands, and trains no steps the
    # checks here do not need): the one in the "Live controls" box (right of the form) changes this run; the form's
    # own field (folded away while the run is active) stays enabled, for the next run (a Start now queues it).
    expect(page.get_by_role("spinbutton", name=lr_field, include_hidden=True).first).to_be_enabled()
    live_lr = page.get_by_role("spinbutton", name=lr_field).last
    expect(live_lr).to_be_enabled()
    enter(live_lr, "0.001")
    page.get_by_role("button", name="Apply").click()
    # The worker's event says "lr 0.01 -> 0.001 at step N"; Streamlit's Markdown draws "->" as an arrow.
    expect(page.get_by_text(re.compile(r"applied, lr 0\.01 (->|→) 0\.001 at step \d+")).first).to_be_visible()

    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_text(re.compile(r"resumed at step \d+")).first).to_be_visible()

    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_text(re.compile(r"checkpoint saved")).first).to_be_visible()
    status = wait_for_state(run, "stopped")
    assert status["live"]["lr"] == pytest.approx(0.001)
    screenshot(page, "train-stopped", SHOTS)

    # A reload (the URL carries ?run=<id>) shows the same run, stopped.
    page.reload()
    expect(page.get_by_text(run.id).first).to_be_visible()
    expect(page.locator("[data-testid=stMarkdown]").filter(has_text=run.id).filter(has_text="stopped").first) \
        .to_be_visible()
    expect(page.get_by_role("button", name="Start training")).to_be_enabled()
