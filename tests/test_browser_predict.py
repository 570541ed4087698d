"""The Predict page follows the canvas as drawn, in a real browser: a digit drawn in two quick strokes, and the
save buttons stay one row while each drawing's explanations arrive.

A stroke's rerun computes the model input and the answer only; the explanations are worked out in the background
(ui/explaining.py), so the second stroke's rerun never waits behind the first one's integrated gradients. The
test records every state the page passes through (a MutationObserver), then checks against the canvas itself:
the final drawing's answer was on screen while its explanations were still being worked out (they never held it
back), and in the end the 28×28 input shown, the answer and the row-by-row chart are all the final drawing's.

Skipped without Chromium unless BRNN_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from browser_helpers import draw_stroke, wait_js
from browser_server import browser_page, require_browser, start_server, stop_server
from helpers import copy_run, save_rendered, wait_for
from PIL import Image

from benchmarks.stroke_to_prediction import CANVAS, DRAWN, FOUR, SETTLED_JS, draw, record, recorded
from brnn_core.charts import READING_TITLE
from brnn_core.inference.predictor import Predictor

try:
    from playwright.sync_api import expect
except ImportError:
    expect = None

require_browser()

pytestmark = pytest.mark.browser
T = 120_000  # ms
if expect is not None:
    expect.set_options(timeout=T)
READING_INPUT_JS = f"""() => {{
    const p = [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullLayout
        && String(p._fullLayout.title.text).includes({READING_TITLE!r}));
    return p ? p._fullData[0].z.map(row => Array.from(row)) : null;
}}"""
# From now on, the most rows of save buttons on the page at once (counted by their visible button "1"; each button
# has a hidden twin for narrow screens)
WATCH_SAVE_ROWS_JS = """() => {
    window.__saveRows = 0;
    const rows = () => [...document.querySelectorAll('button')]
        .filter(b => b.innerText.trim() === '1' && b.checkVisibility()).length;
    new MutationObserver(() => { window.__saveRows = Math.max(window.__saveRows, rows()); })
        .observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
}"""
INPUT = "[data-testid=stImage] img"  # the first image: the 28x28 input, above the saved drawings
MORE_INK = ([(60, 235), (220, 235)], [(60, 25), (220, 25)], [(30, 40), (30, 240)], [(250, 40), (250, 240)])
SAVED = 64  # drawings saved before the server starts: their listing is drawn after the canvas, on every page run


@pytest.fixture(scope="module")
def server(finished, sample, tmp_path_factory):
    root = tmp_path_factory.mktemp("predict-walk")
    copy_run(finished, root / "runs")
    save_rendered(root / "data", sample, SAVED)
    srv = start_server(root / "runs", root / "data", root / "server.log")
    yield srv
    stop_server(srv)


def canvas_rgba(page) -> np.ndarray:
    """The canvas as drawn (Fabric's lower canvas holds the strokes), RGBA."""
    url = page.locator(DRAWN).evaluate("c => c.toDataURL('image/png')")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGBA"))


def shown_input(page, src: str) -> np.ndarray:
    """The 28×28 image the page shows (drawn 6× larger), back at 28×28 in [0, 1]."""
    body = page.request.get(src).body()
    big = np.asarray(Image.open(io.BytesIO(body)).convert("L"), dtype=np.float32) / 255
    return big.reshape(28, 6, 28, 6).mean(axis=(1, 3))


def test_two_quick_strokes_show_the_final_drawings_input_and_answer(server, finished, tmp_path):
    predictor = Predictor.from_checkpoint(finished.best_ckpt)
    with browser_page(tmp_path / "last.png", T) as page:
        page.goto(f"{server.url}/predict")
        expect(page.get_by_text("Draw a digit on the canvas to see what the model predicts.")).to_be_visible()
        expect(page.locator(CANVAS)).to_be_visible()
        page.wait_for_load_state("networkidle")
        record(page)
        draw(page, FOUR)

        def settled_on_the_canvas() -> tuple[np.ndarray] | None:
            """What the model must see for the canvas as it is, once the page shows that and nothing is being worked
            out. A settled page alone is not enough: on a busy machine the second stroke's rerun can begin after the
            page had settled on the first stroke."""
            wait_js(page, SETTLED_JS, timeout=T)
            x = predictor.model_input(canvas_rgba(page)).numpy()
            shown = page.evaluate(READING_INPUT_JS)
            return (x,) if shown is not None and np.allclose(np.asarray(shown), x, atol=1e-4) else None

        (x,) = wait_for(settled_on_the_canvas, T / 1000, "the page to settle on the final drawing", 0.25)
        expected = predictor.classes[predictor.assess(x).top]
        assert page.locator("[data-testid=stMetricValue]").inner_text() == expected
        src = page.locator(INPUT).first.get_attribute("src")
        assert np.abs(shown_input(page, src) - x).max() < 0.1  # the image is a JPEG: close, not equal

        states, _ = recorded(page)
        # the final answer came first, its explanations after: they never held a stroke's answer back
        assert any(s["src"] and s["src"].endswith(src.rsplit("/", 1)[-1]) and s["verdict"] == expected and s["working"]
                   for s in states), states[-5:]


def test_the_save_buttons_stay_one_row_while_the_explanations_arrive(server, tmp_path):
    """A drawing's run shows notes where its explanations go, and a poll; the run once they are ready draws them
    instead. The save buttons below must not move between the two: Streamlit keeps the old row until the later run
    ends, here after listing the saved drawings, so a row that moved showed twice (and a click on "1" was ambiguous).
    Five drawings on one canvas (a 4, then a stroke more each time), each explained after its run."""
    with browser_page(tmp_path / "last.png", T) as page:
        page.goto(f"{server.url}/predict")
        expect(page.locator(CANVAS)).to_be_visible()
        page.evaluate(WATCH_SAVE_ROWS_JS)
        shown = None
        for strokes in (FOUR, *((points,) for points in MORE_INK)):
            for stroke in strokes:
                draw_stroke(page, stroke)
            if shown:  # the 28x28 input shown is this drawing's
                wait_js(page, f"(src) => document.querySelector({INPUT!r}).getAttribute('src') !== src", arg=shown,
                        timeout=T)
            wait_js(page, SETTLED_JS, timeout=T)
            wait_js(page, "() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=T)  # run ended
            shown = page.locator(INPUT).first.get_attribute("src")
        assert page.evaluate("() => window.__saveRows") == 1
