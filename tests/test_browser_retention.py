"""The Runs page's "Free disk space" in a real browser: the folder's total in the title, a preview that deletes
nothing, then the confirmed prune, after which the pruned run is still listed and says why it cannot be branched.

Three real tiny runs train before the server starts (two seeds of one setting, one of another).
Skipped without Chromium unless BRNN_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import re

import pytest
from browser_helpers import open_expander
from browser_server import browser_page, require_browser, screenshot, start_server, stop_server
from helpers import REPO, TINY, train_run, tree_digest

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # three runs train before the server starts
require_browser()  # skips the module before playwright is imported below

from playwright.sync_api import expect  # noqa: E402

WAIT_MS = 60_000  # anything visible: no run trains while the page is used


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("retention-browser")
    runs, data = root / "runs", root / "data"
    trained = []
    for seed, lr in ((0, 0.01), (1, 0.01), (0, 0.003)):
        run, state = train_run(runs, data, base=TINY, epochs=1, seed=seed, lr=lr)
        assert state == "finished", run.status()
        trained.append(run)
    srv = start_server(runs, data, root / "server.log", env={"OMP_NUM_THREADS": "1"})
    try:
        yield srv, runs, trained
    finally:
        stop_server(srv)


def test_free_disk_space_previews_then_prunes(folder):
    srv, runs, (a, b, alone) = folder
    def best_loss(run):
        m = run.metrics()
        return float(m[m.split == "val"].loss.min())

    keeper, loser = sorted((a, b), key=best_loss)
    expect.set_options(timeout=WAIT_MS)
    shots = REPO / "test-output" / "screenshots"
    with browser_page(shots / "runs-retention-last-state.png", WAIT_MS) as page:
        page.goto(f"{srv.url}/runs")
        title = page.get_by_text(re.compile(r"Free disk space · the runs folder holds [\d.]+ [kMG]B in 3 runs"))
        expect(title.first).to_be_visible()
        title.first.click()
        before = tree_digest(runs)
        page.get_by_role("button", name="Preview (3 runs shown)").click()
        confirm = page.get_by_text(re.compile(r"Yes, delete the checkpoints of these 1 runs"))
        expect(confirm.first).to_be_visible()
        assert tree_digest(runs) == before  # the preview deleted nothing
        free = page.get_by_role("button", name=re.compile(r"^Free [\d.]+ [kMG]B$"))
        expect(free).to_be_disabled()
        confirm.first.click()
        expect(free).to_be_enabled()
        screenshot(page, "runs-free-disk-space", shots)
        free.click()
        expect(page.get_by_text(re.compile(r"Freed [\d.]+ [kMG]B: the checkpoints of 1 run")).first).to_be_visible()
        assert keeper.best_ckpt.is_file() and alone.best_ckpt.is_file()
        assert not loser.best_ckpt.is_file() and not loser.last_ckpt.is_file()
        assert loser.metrics_path.is_file() and loser.config_path.is_file()
        # the pruned run is still there to inspect; its branch form says why there is nothing to branch from
        box = page.get_by_role("textbox", name="Filter")
        box.fill(f"id == {loser.id}")
        box.press("Enter")
        expect(page.get_by_role("combobox", name="Inspect one run")).to_have_value(loser.id)
        open_expander(page, "Branch from here")
        reason = r"last\.pt and best\.pt were pruned by runs prune to save disk .*nothing is left to branch from"
        expect(page.get_by_text(re.compile(reason)).first).to_be_visible()
