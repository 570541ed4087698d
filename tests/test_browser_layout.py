"""Layout in a real browser, measured by bounding boxes: the Sweep page's parallel-coordinates title clear of the
axis names under it, and the Predict page's saved drawings in rows whose Delete buttons stay in line when a label
reads "7 · held out".

One server on one folder: a copy of the session's finished run (its checkpoint for Predict), saved drawings of
which some are held out, and a sweep folder written with the sweep's own writers (sweep.json, trial runs with
their metrics and status; no Ray: the page only reads these files), one trial still running under this process.
Skipped without Chromium unless BRNN_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import re

import pytest
from browser_helpers import wait_js
from browser_server import browser_page, require_browser, start_server, stop_server
from helpers import REPO, copy_run
from sweep_helpers import written_sweep

from benchmarks.harness.bench_predict import synthetic_canvas
from brnn_core.data.drawings import is_held_out, save_drawing

require_browser()

from playwright.sync_api import expect  # noqa: E402

pytestmark = [pytest.mark.browser]
SHOTS = REPO / "test-output" / "screenshots"
T = 120_000  # ms: a fresh server loads PyTorch before its first page

# Each text element of the parallel-coordinates plot: its kind (the figure's title or an axis name) and box.
PARCOORDS_TEXT_JS = """() => {
    const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullData && p._fullData.length
        && p._fullData[0].type === 'parcoords');
    if (!plot) return null;
    const box = (kind) => (e) => { const b = e.getBoundingClientRect();
        return {kind, text: e.textContent, left: b.left, top: b.top, right: b.right, bottom: b.bottom}; };
    return [...[...plot.querySelectorAll('.gtitle')].map(box('title')),
            ...[...plot.querySelectorAll('.axis-title')].map(box('axis'))];
}"""
# Each saved drawing's label (the caption before its Delete button, in page order) and button: the label's text,
# height and bottom, the button's top.
DRAWINGS_JS = """() => {
    const parts = [...document.querySelectorAll(
        '[data-testid=stImageCaption], [data-testid=stCaptionContainer], button')];
    const out = [];
    let label = null;
    for (const e of parts) {
        if (e.tagName !== 'BUTTON') { label = e; continue; }
        const b = e.getBoundingClientRect();
        if (!e.innerText.includes('Delete') || !label || !b.height) continue;  // (a tooltip's hidden copy)
        const c = label.getBoundingClientRect();
        out.push({text: label.innerText, caption: c.height, captionBottom: c.bottom, buttonTop: b.top});
    }
    return out;
}"""
CLASSES = [str(d) for d in range(10)]


@pytest.fixture(scope="module")
def server(tmp_path_factory, finished):
    root = tmp_path_factory.mktemp("layout")
    runs, data = root / "runs", root / "data"
    copy_run(finished, runs)
    canvas = synthetic_canvas()
    for k in range(12):  # three of each of four classes: the third of each is held out
        save_drawing(data, canvas, k % 4, CLASSES, now=1.7e9 + k)
    assert is_held_out(2) and not is_held_out(1)
    sweep_id = written_sweep(runs, data)
    srv = start_server(runs, data, root / "server.log", env={"OMP_NUM_THREADS": "1"})
    try:
        yield srv, sweep_id
    finally:
        stop_server(srv)


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def test_the_parallel_coordinates_title_is_clear_of_the_axis_names(server):
    srv, sweep_id = server
    with browser_page(SHOTS / "layout-sweep-last-state.png", T) as page:
        page.goto(f"{srv.url}/sweep?sweep={sweep_id}")
        expect(page.get_by_text(re.compile(r"4 of 4 trials started"))).to_be_visible(timeout=T)
        wait_js(page, f"() => ({PARCOORDS_TEXT_JS})() && ({PARCOORDS_TEXT_JS})().length >= 3")
        texts = page.evaluate(PARCOORDS_TEXT_JS)
        (title,) = [t for t in texts if t["kind"] == "title"]
        axes = [t for t in texts if t["kind"] == "axis"]
        assert {a["text"] for a in axes} >= {"lr (log)", "best val_loss"}, axes
        assert not [a for a in axes if overlap(title, a)], (title, axes)
        assert title["bottom"] <= min(a["top"] for a in axes), (title, axes)


def test_saved_drawings_keep_their_delete_buttons_in_line(server):
    srv, _ = server
    with browser_page(SHOTS / "layout-predict-last-state.png", T) as page:
        page.goto(f"{srv.url}/predict")
        expect(page.get_by_text("12 saved drawings for these classes")).to_be_visible(timeout=T)
        wait_js(page, f"() => ({DRAWINGS_JS})().length === 12")
        # measured once the thumbnails have loaded and the page has stopped moving: on a busy machine a row laid
        # out around images still loading read as rows of 3, 4 and 5
        wait_js(page, "() => [...document.querySelectorAll('[data-testid=stImage] img')]"
                ".every(img => img.complete)", timeout=T)
        cells, before = page.evaluate(DRAWINGS_JS), None
        for _ in range(50):
            if cells == before:
                break
            page.wait_for_timeout(300)
            before, cells = cells, page.evaluate(DRAWINGS_JS)
        held = [c for c in cells if c["text"].endswith("· held out")]
        assert len(held) == 4, cells
        one_line = min(c["caption"] for c in cells)
        assert all(c["caption"] == one_line for c in cells), cells  # "7 · held out" on one line, like "7"
        rows: dict[float, list] = {}
        for c in cells:
            rows.setdefault(round(c["buttonTop"]), []).append(c)
        assert sorted(len(r) for r in rows.values()) == [4, 8], rows  # 12 drawings: rows of 8, each in line
        assert all(c["captionBottom"] <= c["buttonTop"] for c in cells)
