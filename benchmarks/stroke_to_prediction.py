"""Stroke to final prediction: a 4 drawn in two quick strokes on the Predict page, in Chromium; seconds from the
last stroke's mouse-up until the page shows the final drawing's input and answer (and keeps them), and until its
explanation charts (the row-by-row reading, the attribution, what each direction drew on; with --inside also the look
inside) are the final drawing's too.

    .venv/bin/python -m benchmarks.stroke_to_prediction [--repeats 7] [--runs-dir RUNS] [--inside] [--smoke]
                                                        [--json FILE]

Without --runs-dir it first trains the default model for one epoch on mnist-sample from the CLI, in a temporary
folder: a trained model is what makes integrated gradients slow (it refines its path). The default dataset's
pen-stroke copies are made before the server starts (`python -m brnn_core predraw`), as on any server after
its first minute: a fresh server draws them in the background, which slows everything else (benchmarks.first_contact
measures that). Each repeat clears the canvas and draws the two strokes back to back, a slightly different 4 each
time; the first repeat (PyTorch's and captum's first calls) is reported apart from the median. The machine's load
average is printed before and after: other work on the machine slows every number here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.browser import REPO, VIEWPORT, launch_chromium, start_server, stop_server

CANVAS = "[data-testid=stBidiComponentIsolated] canvas.upper-canvas"
DRAWN = "[data-testid=stBidiComponentIsolated] canvas.dc-canvas.lower-canvas"  # Fabric's canvas with the strokes
FOUR = ([(90, 60), (90, 150), (200, 150)], [(180, 50), (180, 250)])  # the two strokes of a 4, drawn back to back
WORKING = "Working out"  # what the page shows while an explanation is worked out (ui/explaining.py)

# From now on, every state of the page and the time of each mouse-up. A state: its time, the 28×28 image shown, the
# answer, whether an explanation is still being worked out, and a fingerprint of the charts drawn (each chart's
# title and the sum of its values: a heatmap's cells, a bar chart's bars).
RECORD_JS = f"""() => {{
    window.__states = []; window.__ups = [];
    const values = d => d.z ? d.z.flat() : (Array.isArray(d.x) ? d.x : []);  // a heatmap's cells, a bar chart's bars
    const charts = () => [...document.querySelectorAll('.js-plotly-plot')].filter(p => p._fullData && p._fullData[0])
        .map(p => String(p._fullLayout.title.text) + ':' + p._fullData.map(d => values(d).reduce(
            (a, b) => a + (Number(b) || 0), 0)).reduce((a, b) => a + b, 0).toFixed(4)).join('|');
    const snap = () => {{
        const img = document.querySelector('[data-testid=stImage] img');
        const verdict = document.querySelector('[data-testid=stMetricValue]');
        window.__states.push({{t: performance.now(), src: img ? img.src : null, charts: charts(),
                               verdict: verdict ? verdict.innerText : null,
                               working: document.body.innerText.includes({WORKING!r})}});
    }};
    new MutationObserver(snap).observe(document.body, {{subtree: true, childList: true, characterData: true,
                                                         attributes: true}});
    window.addEventListener('mouseup', () => window.__ups.push(performance.now()), true);
}}"""


def settled_js(plots: int) -> str:
    """True once nothing is being worked out and the answer and `plots` charts are on the page."""
    return (f"() => !document.body.innerText.includes({WORKING!r}) && !!document.querySelector("
            f"'[data-testid=stMetricValue]') && document.querySelectorAll('.js-plotly-plot').length >= {plots}")


SETTLED_JS = settled_js(4)  # the probabilities, the row-by-row reading, the attribution, what each direction drew on


def four(k: int = 0) -> tuple[list, list]:
    """FOUR with a shorter second stroke for each k: another drawing each time, whose explanations no earlier
    repeat has worked out."""
    first, second = FOUR
    return first, [second[0], (second[1][0], second[1][1] - 6 * k)]


def draw(page, strokes) -> None:
    """Mouse strokes through these points (canvas pixels: the canvas is 280×280), one right after another."""
    box = page.locator(CANVAS).bounding_box()
    for points in strokes:
        page.mouse.move(box["x"] + points[0][0], box["y"] + points[0][1])
        page.mouse.down()
        for x, y in points[1:]:
            page.mouse.move(box["x"] + x, box["y"] + y, steps=8)
        page.mouse.up()


def record(page) -> None:
    page.evaluate(RECORD_JS)


def recorded(page) -> tuple[list[dict], list[float]]:
    return page.evaluate("() => [window.__states, window.__ups]")


def timings(states: list[dict], last_up: float, final: dict) -> dict[str, float | None]:
    """Seconds after `last_up` until the final input and answer are shown for good (`final`: the settled page's
    state), and until the charts are the final drawing's too, with nothing being worked out."""
    def answered(s: dict) -> bool:
        return bool(s["src"]) and s["src"] == final["src"] and s["verdict"] == final["verdict"]

    def explained(s: dict) -> bool:
        return answered(s) and not s["working"] and s["charts"] == final["charts"]

    after = [s for s in states if s["t"] >= last_up]
    out = {}
    for name, done in (("answer_s", answered), ("explained_s", explained)):
        k = next((k for k in range(len(after)) if all(done(s) for s in after[k:])), None)
        out[name] = None if k is None else round((after[k]["t"] - last_up) / 1000, 3)
    return out


def predraw(data_dir: Path) -> None:
    """The default dataset's pen-stroke copies, made now rather than by the server while it is measured."""
    from brnn_core.data.datasets import default_dataset

    subprocess.run([sys.executable, "-m", "brnn_core", "predraw", default_dataset(data_dir), "--data-dir",
                    str(data_dir), "--runs-dir", str(data_dir.parent / "runs")], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)


def train_default(root: Path, smoke: bool) -> Path:
    runs = root / "runs"
    settings = ["epochs=1"] + (["hidden_size=32"] if smoke else [])
    env = {**os.environ, "BRNN_RUNS_DIR": str(runs), "BRNN_DATA_DIR": str(root / "data"), "BRNN_PROGRESS": "plain"}
    subprocess.run([sys.executable, "-m", "brnn_core", "train", *[a for s in settings for a in ("--set", s)]],
                   cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return runs


def open_inside(page) -> int:
    """Open the Inside expander (it is computed only while open); returns how many charts a settled page then
    has: the four above it, its heatmap and its rows that mattered."""
    draw(page, four())
    page.get_by_text("Inside the").first.click()
    page.get_by_text("Rows that mattered").first.wait_for()
    return 6


def once(page, k: int, shot: Path, plots: int) -> dict[str, float | None]:
    page.get_by_role("button", name="Clear").click()
    page.get_by_text("Draw a digit on the canvas to see what the model predicts.").wait_for()
    page.locator(CANVAS).wait_for()
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(500)  # the new canvas mounted
    record(page)
    draw(page, four(k))
    try:
        page.wait_for_function(settled_js(plots))
    except Exception:
        page.screenshot(path=str(shot), full_page=True)
        print(f"not settled: the page is in {shot}", flush=True)
        raise
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(500)  # a last redraw, recorded
    states, ups = recorded(page)
    return timings(states, ups[-1], states[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stroke_to_prediction",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--runs-dir", type=Path, default=None, help="a runs folder with a trained run (default: "
                        "train the default model for one epoch first)")
    parser.add_argument("--inside", action="store_true", help="with the Inside expander open: its states and the "
                        "rows that mattered are worked out for each drawing too")
    parser.add_argument("--smoke", action="store_true", help="a hidden-32 model and 2 repeats: checks that it runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="stroke-bench-"))
    repeats = 2 if args.smoke else args.repeats
    runs = args.runs_dir or train_default(root, args.smoke)
    predraw(root / "data")
    load_before = os.getloadavg()
    server = start_server(runs, root / "data", root / "server.log")
    rows = []
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_context(viewport=VIEWPORT).new_page()
            page.set_default_timeout(120_000)
            page.goto(f"{server.url}/predict")
            page.locator(CANVAS).wait_for()
            plots = open_inside(page) if args.inside else 3
            for k in range(repeats + 1):
                rows.append(once(page, k, root / "not-settled.png", plots))
                print(f"{'warm-up' if k == 0 else f'repeat {k}'}: {rows[-1]}", flush=True)
            browser.close()
    finally:
        stop_server(server)
    load_after = os.getloadavg()
    median = {key: statistics.median(r[key] for r in rows[1:] if r[key] is not None) for key in rows[0]}
    print(f"median of {repeats}: {median}; load average (1, 5, 15 min) before {load_before}, after {load_after}, "
          f"{os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps({"warm_up": rows[0], "repeats": rows[1:], "median": median,
                                         "load_before": load_before, "load_after": load_after}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
