"""What the browser tests read off a dashboard page and draw on it: the progress step, a chart's points and
traces, a metric's value, strokes on the Predict page's canvas. Plain functions over a Playwright page."""

from __future__ import annotations

import re

T = 120_000  # ms: the default wait for anything to show; two busy cores, training alongside
POLL_MS = 100  # a page condition is checked this often, not on every animation frame (Playwright's default)


def wait_js(page, js: str, *, arg=None, timeout: float | None = None) -> None:
    """page.wait_for_function, checked every POLL_MS: on every frame, a wait that lasts while a run trains keeps
    Chromium rendering 60 frames a second, CPU the training beside it on two cores needs."""
    page.wait_for_function(js, arg=arg, polling=POLL_MS, timeout=timeout)  # None: the page's default timeout


def open_expander(page, label: str, tries: int = 3) -> None:
    """Open the expander `label` and wait until its content shows. A click that lands while the page reruns can be
    lost with the element it hit, so it is clicked again, but only while the content is still hidden: a click on an
    open expander closes it. Opening is the browser's own work, no round trip to the server."""
    from playwright.sync_api import expect  # here: a module without playwright installed is skipped, not broken

    expander = page.locator("[data-testid=stExpander]").filter(has=page.locator("summary", has_text=label)).first
    for attempt in range(tries):
        expander.locator("summary").click()
        try:
            expect(expander.locator("[data-testid=stExpanderDetails]")).to_be_visible(timeout=10_000)
            return
        except AssertionError:
            if attempt == tries - 1:
                raise


def metric_value(page, label: str):
    return page.locator("[data-testid=stMetric]").filter(has_text=label).locator("[data-testid=stMetricValue]")


def progress_step(page) -> int:
    """The step number in the live progress text 'epoch 1/5 · step 37/205 · ...', or -1."""
    texts = page.locator("[data-testid=stProgress]").all_inner_texts()
    for text in texts:
        found = re.search(r"step (\d+)/\d+", text)
        if found:
            return int(found.group(1))
    return -1


def wait_step_above(page, step: int, timeout_ms: float = T) -> int:
    wait_js(
        page,
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
    wait_js(page, f"(args) => ({CHART_POINTS_JS})(args[0]) > args[1]", arg=[title, n], timeout=T)
    return chart_points(page, title)


def canvas_box(page) -> dict:
    from playwright.sync_api import expect  # here: a module without playwright installed is skipped, not broken

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
    from playwright.sync_api import expect

    for attempt in range(3):
        for stroke in strokes:
            draw_stroke(page, stroke)
        try:
            expect(prediction).to_be_visible(timeout=30_000)
            return
        except AssertionError:
            if attempt == 2:
                raise


# the class of the highest bar in the "Class probabilities" chart, or null
TOP_CLASS_JS = """() => {
    const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullLayout && p._fullData
        && p._fullData.length && String(p._fullLayout.title.text).includes('Class probabilities'));
    if (!plot) return null;
    const d = plot._fullData[0], ys = Array.from(d.y);
    return String(d.x[ys.indexOf(Math.max(...ys))]);
}"""


PLOT_JS = """(title) => [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullLayout && p._fullData
    && String(p._fullLayout.title.text).includes(title))"""


def plot_info(page, title: str) -> dict | None:
    """Traces of the Plotly chart whose title contains `title`: their types and heatmap row counts."""
    return page.evaluate(f"""(title) => {{ const p = ({PLOT_JS})(title); if (!p) return null;
        return {{traces: p._fullData.map(d => d.type), rows: p._fullData.map(d => d.z ? d.z.length : 0),
                 cols: p._fullData.map(d => d.z && d.z[0] ? d.z[0].length : 0)}}; }}""", title)
