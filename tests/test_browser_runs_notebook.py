"""The Runs page as a lab notebook, in a real browser: a seed group of three real tiny runs (seeds 0, 1, 2) is one
row with mean ± std and n, selecting it opens its runs and draws its band; the filter narrows the table and refuses
code; tags and a note saved show as table columns; the export downloads a CSV that pandas reads. Last, `compare`
makes that group one entry of a cell x direction matrix (training the other three entries' seeds), and the Compare
page shows the matrix, its bands and gradient flow, and links each entry to its group on the Runs page.

The runs train in this process before the server starts (module-scoped); the tests share one page, in file order.
Skipped without Chromium unless BRNN_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
from browser_helpers import open_expander, wait_js
from browser_server import browser_page, require_browser, screenshot, start_server, stop_server
from helpers import REPO, TINY, train_run

from brnn_core.runs.index import RunIndex
from brnn_core.runs.notes import read_notes

try:
    from playwright.sync_api import expect
except ImportError:
    expect = None

require_browser()

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # four runs train before the server starts
SHOTS = REPO / "test-output" / "screenshots"
T = 60_000  # ms: anything visible (no training runs while the page is used)
if expect is not None:
    expect.set_options(timeout=T)
SEEDS = (0, 1, 2)
FLOW_EVERY = 4  # a gradient-flow measurement every 4 of the 16 steps (it only records: the seed group is the same)
ROW_PX = 35  # Streamlit's dataframe rows (and its header) are 35 px tall

# Each cell of the dataframes (glide-data-grid keeps an accessible table of them): [table, row, column, text].
CELLS_JS = """() => [...document.querySelectorAll('[data-testid=stDataFrame]')].flatMap((t, k) =>
    [...t.querySelectorAll('td')].map(td => [k, Number(td.parentElement.getAttribute('aria-rowindex')),
                                             Number(td.getAttribute('aria-colindex')), td.innerText]))"""
# The traces of the Plotly chart whose title contains the text: their name, fill and line colour.
TRACES_JS = """(title) => {
    const p = [...document.querySelectorAll('.js-plotly-plot')].find(p => p._fullLayout && p._fullData
        && String(p._fullLayout.title.text).includes(title));
    return p ? p._fullData.map(d => ({name: d.name, fill: d.fill, colour: d.line && d.line.color,
                                     fillcolor: d.fillcolor, n: d._length})) : null;
}"""


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """Three tiny runs that differ only in seed and one of another lr, then the server on their folder:
    (server, runs folder, group id, the lone run's id, a folder for the filter's would-be victim)."""
    root = tmp_path_factory.mktemp("notebook")
    runs, data = root / "runs", root / "data"
    for seed in SEEDS:
        run, state = train_run(runs, data, base=TINY, epochs=2, seed=seed, gradient_flow_every=FLOW_EVERY)
        assert state == "finished", run.status()
    lone, state = train_run(runs, data, base=TINY, epochs=2, lr=0.003, gradient_flow_every=FLOW_EVERY)
    assert state == "finished", lone.status()
    table = RunIndex(runs).table()
    (group,) = table[table["run_id"] != lone.id]["group"].unique()
    srv = start_server(runs, data, root / "server.log", env={"OMP_NUM_THREADS": "1"})
    try:
        yield srv, runs, group, lone.id, root
    finally:
        stop_server(srv)


@pytest.fixture(scope="module")
def page(notebook):
    with browser_page(SHOTS / "runs-notebook-last-state.png", T) as pg:
        yield pg


def table_rows(page, table: int = 0) -> list[list[str]]:
    """The text of each row of the page's `table`-th dataframe, in order."""
    rows: dict[int, dict[int, str]] = {}
    for k, row, col, text in page.evaluate(CELLS_JS):
        if k == table:
            rows.setdefault(row, {})[col] = text
    return [[cells[c] for c in sorted(cells)] for _, cells in sorted(rows.items())]


def wait_rows(page, predicate_js: str) -> None:
    """Until some row of the first dataframe has a cell for which `predicate_js` (a JS function of its text) holds."""
    wait_js(page, f"() => ({CELLS_JS})().some(c => c[0] === 0 && ({predicate_js})(c[3]))", timeout=T)


def click_row(page, table: int, row: int) -> None:
    """Tick a dataframe row's selection box (drawn on a canvas: clicked where it is)."""
    grid = page.locator("[data-testid=stDataFrame]").nth(table)
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 15, box["y"] + ROW_PX * (row + 1) + ROW_PX / 2)


def traces(page, title: str) -> list[dict] | None:
    return page.evaluate(TRACES_JS, title)


def enter_filter(page, text: str) -> None:
    box = page.get_by_role("textbox", name="Filter")
    box.fill(text)
    box.press("Enter")


def test_a_seed_group_is_one_row_with_mean_std_and_n(notebook, page):
    srv, runs, group, lone, _ = notebook
    page.goto(f"{srv.url}/runs")
    wait_rows(page, f"t => t === 'group {group} · 3 runs'")
    rows = {r[0]: r for r in table_rows(page)}
    assert set(rows) == {f"group {group} · 3 runs", lone}
    table = RunIndex(runs).table()
    values = 100 * table[table["group"] == group]["best_val_acc"]
    row = rows[f"group {group} · 3 runs"]
    assert row[1] == "3" and row[2] == "finished"  # n, state
    assert f"{values.mean():.2f} ± {values.std(ddof=1):.2f}" in row, row
    assert rows[lone][1] == "1"
    expect(page.get_by_role("switch", name="Group seeds")).to_be_checked()


def test_selecting_the_group_opens_it_and_draws_its_band(notebook, page):
    _, runs, group, lone, _ = notebook
    index = [r[0] for r in table_rows(page)].index(f"group {group} · 3 runs")
    click_row(page, 0, index)
    expect(page.get_by_text(f"Seed group {group}").first).to_be_visible()
    expect(page.get_by_text(re.compile(rf"showing group {group} \(3 runs, mean ± std\)\.")).first).to_be_visible()
    for title in ("Training loss", "Validation loss"):
        # each chart is redrawn on its own: the other may still show every run for a moment
        wait_js(page, f"() => {{ const t = ({TRACES_JS})({title!r}); return t && t.length === 3; }}",
                timeout=T)
        lower, upper, mean = traces(page, title)  # the group alone: its band's edges and its mean
        assert mean["name"] == f"group {group} mean ± std (n=3)", title
        assert upper["fill"] == "tonexty" and upper["fillcolor"].startswith("rgba(") and lower["fill"] == "none"
        assert lower["colour"] == upper["colour"] == mean["colour"] and mean["n"] > 1
    expect(page.locator(".legendtext", has_text=f"group {group} mean ± std (n=3)").first).to_be_visible()
    # the opened group's own table (the page's second): run_id, seed, ...
    wait_js(page, f"() => ({CELLS_JS})().filter(c => c[0] === 1 && c[2] === 2).length === 3", timeout=T)
    seeds = [r[1] for r in table_rows(page, 1)]
    assert seeds == ["0", "1", "2"], table_rows(page, 1)
    screenshot(page, "runs-seed-group", SHOTS)


def test_the_filter_narrows_the_table_and_refuses_code(notebook, page):
    _, _, group, lone, root = notebook
    enter_filter(page, "lr < 0.005")
    wait_js(page, f"() => ({CELLS_JS})().filter(c => c[0] === 0 && c[2] === 1).map(c => c[3])"
            f".join() === {lone!r}", timeout=T)
    expect(page.get_by_role("switch", name="Group seeds")).to_be_disabled()  # one run: nothing to group
    victim = root / "victim"
    enter_filter(page, f"__import__('os').system('touch {victim}')")
    expect(page.get_by_text("The filter does not parse, so every run is listed").first).to_be_visible()
    wait_rows(page, f"t => t === 'group {group} · 3 runs'")  # every run listed again
    assert not victim.exists()
    enter_filter(page, "")
    expect(page.get_by_text("The filter does not parse")).to_have_count(0)


def test_tags_and_a_note_saved_show_as_table_columns(notebook, page):
    _, runs, _, _, _ = notebook
    inspected = page.get_by_role("combobox", name="Inspect one run").input_value()
    open_expander(page, "Tags and note")
    page.get_by_role("textbox", name="Tags (comma-separated)").fill("baseline, seed-study")
    page.get_by_role("textbox", name="Note").fill("the one to beat")
    page.get_by_role("button", name="Save tags and note").click()
    expect(page.get_by_text("Tags and note saved.").first).to_be_visible()
    assert read_notes(runs / inspected).tags == ("baseline", "seed-study")
    enter_filter(page, "tag:seed-study")
    wait_js(page, f"() => ({CELLS_JS})().filter(c => c[0] === 0 && c[2] === 1).map(c => c[3])"
            f".join() === {inspected!r}", timeout=T)
    # the grid draws only the columns in view: scroll it to its last ones (tags, note, problem)
    page.evaluate("() => { const s = document.querySelector('[data-testid=stDataFrame] .dvn-scroller');"
                  " s.scrollLeft = s.scrollWidth; }")
    wait_rows(page, "t => t === 'the one to beat'")
    (row,) = table_rows(page)
    assert "baseline,seed-study" in row and "the one to beat" in row, row
    enter_filter(page, "")
    wait_rows(page, "t => t.startsWith('group ')")


def test_the_export_downloads_a_csv_pandas_reads(notebook, page):
    _, runs, group, lone, _ = notebook
    page.get_by_role("button", name="Export 4 runs").click()
    download_button = page.get_by_role("button", name="Download CSV")
    expect(download_button).to_be_visible()
    with page.expect_download() as info:
        download_button.click()
    frame = pd.read_csv(info.value.path())
    assert info.value.suggested_filename == "runs-metrics.csv"
    assert frame["run_id"].nunique() == 4 and {"step", "split", "loss", "train.seed", "tags"} <= set(frame.columns)
    assert sorted(frame[frame["group"] == group].drop_duplicates("run_id")["train.seed"]) == list(SEEDS)
    assert (frame[frame["run_id"] == lone]["train.lr"] == 0.003).all()
    metrics = RunIndex(runs).metrics(lone)
    assert len(frame[frame["run_id"] == lone]) == len(metrics)  # every metrics row of the run


def test_compare_makes_the_group_one_entry_of_a_matrix_and_links_each_entry_to_its_group(notebook, page, brnn):
    srv, runs, group, _, root = notebook
    shared = {**TINY, "epochs": 2, "gradient_flow_every": FLOW_EVERY}
    done = brnn(["compare", "--cells", "lstm,rnn", "--seeds", ",".join(map(str, SEEDS)),
                 *[a for k, v in shared.items() for a in ("--set", f"{k}={v}")]], runs, root / "data")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"LSTM two-way: seed group {group}, 3 of 3 seeds done" in done.stdout  # the notebook's group, reused
    assert "training 9 runs one after another" in done.stdout
    page.goto(f"{srv.url}/compare")
    page.get_by_role("combobox", name="Settings").click()
    page.get_by_role("option", name=re.compile(r"^LSTM, RNN × two-way, one-way · seeds 0, 1, 2 · mnist-sample")).click()
    wait_rows(page, "t => t === '3 finished'")
    rows = table_rows(page)
    assert [r[:3] for r in rows] == [["lstm", "two-way", "3"], ["lstm", "one-way", "3"], ["rnn", "two-way", "3"],
                                     ["rnn", "one-way", "3"]], rows
    assert rows[0][-1] == group
    wait_js(page, f"() => {{ const t = ({TRACES_JS})('Training loss'); return t && t.length === 12; }}",
            timeout=T)  # each entry's band edges and mean
    means = [t["name"] for t in traces(page, "Training loss") if "mean" in t["name"]]
    assert means == [f"{e} mean ± std (n=3)" for e in ("LSTM two-way", "LSTM one-way", "RNN two-way",
                                                         "RNN one-way")]
    # the profiles are a chart of their own, drawn after the curves on a busy machine: wait for it the same way
    wait_js(page, f"() => {{ const t = ({TRACES_JS})('Gradient flow through the rows'); "
            "return t && t.length === 6; }", timeout=T)
    flow = traces(page, "Gradient flow through the rows")
    assert len(flow) == 6 and {t["name"] for t in flow} == {"forward", "backward"}  # two-way: 2 readers, one-way 1
    expect(page.locator("[data-testid=stException]")).to_have_count(0)
    page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollTo(0, 0)")
    screenshot(page, "compare", SHOTS)
    page.get_by_role("link", name=re.compile(r"LSTM two-way")).click()
    expect(page.get_by_role("textbox", name="Filter")).to_have_value(f"group:{group}")
    wait_rows(page, f"t => t === 'group {group} · 3 runs'")
    assert [r[0] for r in table_rows(page)] == [f"group {group} · 3 runs"]
