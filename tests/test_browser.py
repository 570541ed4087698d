"""The dashboard in a real browser: train with live controls, draw a digit, inspect a run.

A module-scoped fixture trains a small model from the CLI (the Predict page needs a decent
checkpoint), starts `streamlit run` on a free port with tmp runs/data folders and drives it with
Debian's Chromium through Playwright. The tests share one page and run in file order.

Without /usr/bin/chromium (or $BRNN_CHROMIUM) the module is skipped, unless BRNN_REQUIRE_BROWSER=1 (CI):
then it fails.
Screenshots go to test-output/screenshots/ (and docs/screenshots/ with BRNN_UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from browser_server import CHROMIUM, Server, browser_page, screenshot, start_server, stop_server, unavailable
from helpers import REPO, finish_cli_training, kill_workers, start_cli_training, wait_for_state
from PIL import Image

from brnn_core.runs.rundir import Run, list_runs
from ui.common import picker_id

pytestmark = [pytest.mark.browser, pytest.mark.worker]

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # reported below: skipped, or failed when BRNN_REQUIRE_BROWSER=1
    expect = sync_playwright = PlaywrightTimeout = PlaywrightError = None


if not CHROMIUM.is_file():
    unavailable(f"{CHROMIUM} not found: install Debian's chromium package (apt-get install chromium)")
if sync_playwright is None:
    unavailable("the playwright package is not installed (pip install -r requirements.txt)")

SHOTS = REPO / "test-output" / "screenshots"
T = 120_000  # ms: the default wait for anything visible; two busy cores, training alongside
LR_FIELD = "Learning rate"
if expect is not None:
    expect.set_options(timeout=T)


@dataclass
class Dashboard:
    server: Server
    runs_dir: Path
    side_dir: Path  # where the Predict page's model trains, away from the dashboard's runs
    data_dir: Path
    trainer: subprocess.Popen


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """The server on tmp folders, and a small model training from the CLI alongside (for Predict/Runs)."""
    root = tmp_path_factory.mktemp("browser")
    runs_dir, side_dir, data_dir = root / "runs", root / "side-runs", root / "data"
    runs_dir.mkdir()
    # 3 epochs of hidden 64 on mnist-sample: about 93% validation accuracy, half the time of hidden 128.
    # It trains while the Train page test runs (that run is stopped early), in its own runs folder, so
    # the dashboard's "one active run at a time" rule is not involved.
    trainer = start_cli_training(side_dir, data_dir, "epochs=3", "hidden_size=64", log=root / "side-train.log")
    server = None
    try:
        server = start_server(runs_dir, data_dir, root / "server.log")
        yield Dashboard(server, runs_dir, side_dir, data_dir, trainer)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(30)
        if server is not None:
            stop_server(server)
        kill_workers(runs_dir)


@pytest.fixture(scope="module")
def finished(dashboard) -> Run:
    """The side model, finished and moved into the dashboard's runs folder (one atomic rename)."""
    side = finish_cli_training(dashboard.trainer, dashboard.side_dir)
    target = dashboard.runs_dir / side.id
    os.rename(side.path, target)
    return Run(target)


@pytest.fixture(scope="module")
def page(dashboard):
    with browser_page(SHOTS / "last-state.png", T) as pg:
        yield pg


def progress_step(page) -> int:
    """The step number in the live progress text 'epoch 1/5 · step 37/205 · ...', or -1."""
    texts = page.locator("[data-testid=stProgress]").all_inner_texts()
    for text in texts:
        found = re.search(r"step (\d+)/\d+", text)
        if found:
            return int(found.group(1))
    return -1


def wait_step_above(page, step: int, timeout_ms: float = T) -> int:
    page.wait_for_function(
        """(min) => [...document.querySelectorAll('[data-testid=stProgress]')].some(el => {
               const m = el.innerText.match(/step (\\d+)\\//); return m && Number(m[1]) > min; })""",
        arg=step, timeout=timeout_ms)
    return progress_step(page)


CHART_POINTS_JS = """(title) => {
    const plots = [...document.querySelectorAll('.js-plotly-plot')].filter(p => p._fullLayout && p._fullData
        && p._fullData.length && String(p._fullLayout.title.text).includes(title));
    return plots.length ? Math.max(...plots.map(p => p._fullData[0]._length || 0)) : -1;
}"""


def chart_points(page, title: str) -> int:
    """Points in the first trace of the Plotly chart with this title (-1 when there is none)."""
    return page.evaluate(CHART_POINTS_JS, title)


def wait_chart_points_above(page, title: str, n: int) -> int:
    page.wait_for_function(f"(args) => ({CHART_POINTS_JS})(args[0]) > args[1]", arg=[title, n], timeout=T)
    return chart_points(page, title)


def metric_value(page, label: str):
    return page.locator("[data-testid=stMetric]").filter(has_text=label).locator("[data-testid=stMetricValue]")


def test_train_with_live_controls(dashboard, page):
    page.goto(dashboard.server.url)
    epochs = page.get_by_role("spinbutton", name="Epochs")
    expect(epochs).to_be_enabled()
    expect(page.get_by_role("spinbutton", name="Hidden size")).to_have_value("128")
    # 20 epochs (820 steps): even on an idle machine the run outlives the live-control steps below, which
    # pause and stop it long before the end.
    epochs.fill("20")
    epochs.press("Enter")
    page.get_by_role("button", name="Start training").click()

    # The worker starts, loads the data and logs: the progress text and the metrics fill in.
    # started, or queued behind the server's background drawing of the default dataset's digits
    expect(page.get_by_text(re.compile(r"Started run \S+|Queued \S+")).first).to_be_visible()
    first = wait_step_above(page, 0)
    expect(metric_value(page, "train loss")).to_have_text(re.compile(r"^\d+\.\d{4}$"))
    points = wait_chart_points_above(page, "Training loss (per step)", 0)
    later = wait_step_above(page, first)
    assert later > first
    assert wait_chart_points_above(page, "Training loss (per step)", points) > points  # the chart grows
    (run,) = list_runs(dashboard.runs_dir)
    assert run.config()["train"]["epochs"] == 20
    expect(page.get_by_text(run.id).first).to_be_visible()
    wait_chart_points_above(page, "Training loss (per step)", 3)  # a curve worth a screenshot
    # The gradient flow through time: measured at step 0, drawn as a heatmap per direction of the last layer
    page.wait_for_function(f"() => ({PLOT_JS})('Gradient flow through time · layer 2')", timeout=T)
    flow = plot_info(page, "Gradient flow through time · layer 2")
    assert flow["traces"] == ["heatmap", "heatmap"] and flow["cols"] == [28, 28] and min(flow["rows"]) >= 1, flow
    screenshot(page, "train-running", SHOTS)

    # Live learning rate: the one in the "Live controls" box (right of the form) changes this run; the form's
    # own field (folded away while the run is active) stays enabled, for the next run (a Start now queues it).
    expect(page.get_by_role("spinbutton", name=LR_FIELD, include_hidden=True).first).to_be_enabled()
    live_lr = page.get_by_role("spinbutton", name=LR_FIELD).last
    expect(live_lr).to_be_enabled()
    live_lr.fill("0.001")
    live_lr.press("Enter")
    page.get_by_role("button", name="Apply").click()
    # The worker's event says "lr 0.01 -> 0.001 at step N"; Streamlit's Markdown draws "->" as an arrow.
    ack = page.get_by_text(re.compile(r"applied, lr 0\.01 (->|→) 0\.001 at step \d+"))
    expect(ack.first).to_be_visible()

    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_text(re.compile(r"paused at step \d+")).first).to_be_visible()
    wait_for_state(run, "paused")
    expect(page.get_by_role("button", name="Resume")).to_be_enabled()
    screenshot(page, "train-paused", SHOTS)

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


def canvas_box(page) -> dict:
    canvas = page.locator("[data-testid=stBidiComponentIsolated] canvas.upper-canvas")
    # a save gives a fresh canvas and reruns the whole page: on a busy machine the page held the outgoing and the
    # fresh canvas at once for a while. A stroke drawn on the outgoing one is lost: draw_until draws again
    expect(canvas).to_have_count(1)
    expect(canvas).to_be_visible()
    canvas.scroll_into_view_if_needed()
    return canvas.bounding_box()


def draw_stroke(page, points: list[tuple[float, float]]) -> None:
    """One mouse stroke through these points (canvas pixels: the canvas is 280x280)."""
    box = canvas_box(page)
    x0, y0 = points[0]
    page.mouse.move(box["x"] + x0, box["y"] + y0)
    page.mouse.down()
    for x, y in points[1:]:
        page.mouse.move(box["x"] + x, box["y"] + y, steps=12)
    page.mouse.up()


def draw_until(prediction, page, strokes: list[list[tuple[float, float]]]) -> None:
    """Draw `strokes` until `prediction` shows. A canvas mounted a moment ago (a busy machine) may miss them:
    they are drawn again, on top of themselves, which gives the same image."""
    for attempt in range(3):
        for stroke in strokes:
            draw_stroke(page, stroke)
        try:
            expect(prediction).to_be_visible(timeout=30_000)
            return
        except AssertionError:
            if attempt == 2:
                raise


TOP_CLASS_JS = """() => {
    const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullLayout && p._fullData
        && p._fullData.length && String(p._fullLayout.title.text).includes('Class probabilities'));
    if (!plot) return null;
    const d = plot._fullData[0], ys = Array.from(d.y);
    return String(d.x[ys.indexOf(Math.max(...ys))]);
}"""


def top_class_in_chart(page) -> str | None:
    """The class of the highest bar in the 'Class probabilities' chart."""
    return page.evaluate(TOP_CLASS_JS)


def test_predict_a_drawn_seven(dashboard, finished, page):
    page.goto(f"{dashboard.server.url}/predict")
    expect(page.get_by_text("Draw a digit on the canvas to see what the model predicts.").first).to_be_visible()
    # The default is the best.pt with the highest validation accuracy. That is usually the fixture's run,
    # but the Train page test's run is here too and, stopped after its first epoch, can score higher:
    # then pick the fixture's model (trained for this test) in the picker, as a user would.
    picker = page.get_by_role("combobox", name="Run checkpoint")
    expect(picker).to_have_value(re.compile(r" · best · \d+\.\d%$"))
    wanted = f"{picker_id(finished.id)} · best ·"
    if not picker.input_value().startswith(wanted):
        picker.click()
        page.get_by_role("option", name=re.compile("^" + re.escape(wanted))).click()
    expect(picker).to_have_value(re.compile(rf"^{re.escape(wanted)} \d+\.\d%$"))
    page.wait_for_load_state("networkidle")
    prediction = metric_value(page, "Prediction")

    draw_until(prediction, page, [[(60, 55), (220, 55)]])  # stroke 1, the top bar of a 7
    expect(page.get_by_text("Class probabilities").first).to_be_visible()
    expect(page.get_by_text("What the model sees (28×28)").first).to_be_visible()

    # Stroke 2, the diagonal: the page reruns with the whole drawing. The metric, the caption and the
    # chart are redrawn one after the other, so wait until all three describe the finished 7.
    draw_stroke(page, [(220, 55), (170, 140), (125, 240)])
    page.wait_for_function(f"() => ({TOP_CLASS_JS})() === '7'", timeout=T)
    expect(prediction).to_have_text("7")
    chart_top = page.evaluate("""() => { const p = [...document.querySelectorAll('.js-plotly-plot')].find(
        p => String(p._fullLayout.title.text).includes('Class probabilities'));
        return Math.max(...Array.from(p._fullData[0].y)); }""")
    caption = page.locator("[data-testid=stCaptionContainer]").filter(has_text="% probability").first
    expect(caption).to_have_text(re.compile(r"^\d+\.\d% probability$"))
    assert abs(float(caption.inner_text().split("%")[0]) - chart_top) <= 0.051, (caption.inner_text(), chart_top)


PLOT_JS = """(title) => [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullLayout && p._fullData
    && String(p._fullLayout.title.text).includes(title))"""


def plot_info(page, title: str) -> dict | None:
    """Traces of the Plotly chart whose title contains `title`: their types and heatmap row counts."""
    return page.evaluate(f"""(title) => {{ const p = ({PLOT_JS})(title); if (!p) return null;
        return {{traces: p._fullData.map(d => d.type), rows: p._fullData.map(d => d.z ? d.z.length : 0),
                 cols: p._fullData.map(d => d.z && d.z[0] ? d.z[0].length : 0)}}; }}""", title)


def test_predict_shows_how_the_model_reads_and_saves_the_drawing(dashboard, finished, page):
    """Continues on the drawn 7: the row-by-row heatmap, the attribution overlay, then saving it as a 7."""
    from brnn_core.charts import ATTRIBUTION_TITLE, READING_TITLE

    expect(page.get_by_text("How the two-way LSTM (BiLSTM) reads your digit").first).to_be_visible()
    page.wait_for_function(f"() => ({PLOT_JS})({READING_TITLE!r}) && ({PLOT_JS})({ATTRIBUTION_TITLE!r})", timeout=T)
    reading = plot_info(page, READING_TITLE)
    # The 28x28 image and, beside it, 28 rows (one per image row) x 10 classes.
    assert reading == {"traces": ["heatmap", "heatmap"], "rows": [28, 28], "cols": [28, 10]}, reading
    overlay = plot_info(page, ATTRIBUTION_TITLE)
    assert overlay == {"traces": ["heatmap", "heatmap"], "rows": [28, 28], "cols": [28, 28]}, overlay
    expect(page.get_by_text(f"{ATTRIBUTION_TITLE}: 7").first).to_be_visible()
    page.wait_for_function(f"() => ({PLOT_JS})('What each direction drew on: 7')", timeout=T)
    readers = page.evaluate(f"""() => ({PLOT_JS})('What each direction drew on: 7')._fullData.map(
        d => [d.type, d.name, d.y.length])""")
    assert readers == [["bar", "forward reader", 28], ["bar", "backward reader", 28]], readers
    expect(page.get_by_text(re.compile("arXiv:1910.12370")).first).to_be_visible()  # the recency bias, in words
    expect(page.get_by_text(re.compile("one row of pixels at a time")).first).to_be_visible()  # plain words
    expect(page.get_by_text(re.compile("cuDNN"))).to_have_count(0)  # no GPU sentence on a CPU machine
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=stImage] img')]"
                           ".every(img => img.complete)", timeout=T)
    screenshot(page, "predict", SHOTS)

    expect(page.get_by_text("No saved drawings yet").first).to_be_visible()
    page.get_by_role("button", name="7", exact=True).click()
    expect(page.get_by_text("Saved as 7.").first).to_be_visible()
    expect(page.get_by_text(re.compile(r"^1 saved drawing for these classes \(0 held out")).first).to_be_visible()
    expect(page.get_by_role("button", name="Delete")).to_have_count(1)
    expect(page.get_by_text("Draw a digit on the canvas to see what the model predicts.").first).to_be_visible()
    (meta,) = (dashboard.data_dir / "my-drawings").glob("*.json")
    assert '"label": 7' in meta.read_text()
    seen = np.asarray(Image.open(meta.with_name(meta.name.replace(".json", ".input.png"))))
    assert seen.shape == (28, 28) and seen.max() > 200 and (seen > 50).sum() > 40  # the 7's strokes, as the model saw
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=stImage] img')]"
                           ".every(img => img.complete)", timeout=T)
    screenshot(page, "predict-saved", SHOTS)


def test_runs_page_shows_a_confusion_matrix(dashboard, finished, page):
    page.goto(f"{dashboard.server.url}/runs")
    expect(page.get_by_text("Inspect one run")).to_be_visible()
    select = page.get_by_role("combobox", name="Inspect one run")
    for attempt in range(3):  # a rerun arriving as the list opens (the table's scores, a fragment) closes it
        select.click()
        try:
            page.get_by_role("option", name=finished.id).click(timeout=20_000)
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise
    expect(select).to_have_value(finished.id)
    title = page.get_by_text("Confusion matrix (test set)").first
    for attempt in range(3):  # a rerun may draw the chart anew between finding its title and scrolling to it
        expect(title).to_be_visible()
        try:
            title.scroll_into_view_if_needed()
            break
        except PlaywrightError:
            if attempt == 2:
                raise
    expect(metric_value(page, "Test accuracy")).to_have_text(re.compile(r"^\d+\.\d\d%$"))
    # The most confident mistakes, as images captioned "true 7 → 9 (88%)", once the test set is loaded.
    expect(page.get_by_text("Misclassified test images")).to_be_visible()
    expect(page.get_by_text(re.compile(r"^true \S+ → \S+ \(\d+%\)$")).first).to_be_visible()
    expect(page.get_by_text("Loading test images")).to_have_count(0)
    screenshot(page, "runs", SHOTS)
    assert Run(finished.path).status()["state"] == "finished"
