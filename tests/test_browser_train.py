"""Train page behaviour that only a browser shows, on a real server.

Find a learning rate: while its test runs only the result's fragment reruns (every second); when the test ends
the button, outside that fragment, must be usable again without touching anything else on the page.
Branch from here: the browser answers a radio with the label it showed, so a checkpoint rewritten meanwhile must
not leave the form with neither checkpoint ticked.

Skipped without Chromium unless BRNN_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import re

import pytest
from browser_helpers import open_expander
from browser_server import browser_page, require_browser, start_server, stop_server
from helpers import copy_run

from brnn_core.runs.rundir import list_runs

try:
    from playwright.sync_api import expect
except ImportError:
    expect = None

require_browser()

pytestmark = [pytest.mark.browser, pytest.mark.worker]
T = 120_000  # ms
if expect is not None:
    expect.set_options(timeout=T)


@pytest.fixture(scope="module")
def server(idx_data, finished, tmp_path_factory):
    root = tmp_path_factory.mktemp("train-walk")
    copy_run(finished, root / "runs")  # an ended run: the Train page offers Branch from here
    # mnist as IDX files (loads in milliseconds); one thread for the lr range test's process
    srv = start_server(root / "runs", idx_data, root / "server.log", env={"OMP_NUM_THREADS": "1"})
    yield srv
    stop_server(srv)


def enter(page, label: str, value: str) -> None:
    field = page.get_by_role("spinbutton", name=label)
    field.fill(value)
    field.press("Enter")
    expect(field).to_have_value(value)


def test_find_a_learning_rate_is_usable_again_when_its_test_ends(server, tmp_path):
    with browser_page(tmp_path / "last.png", T) as page:
        page.goto(server.url)
        expect(page.get_by_role("heading", name="Train a recurrent network")).to_be_visible()
        enter(page, "Hidden size", "16")
        enter(page, "Recurrent layers", "1")
        button = page.get_by_role("button", name="Find a learning rate")
        button.click()
        expect(page.get_by_text(re.compile("^Learning-rate range test:")).first).to_be_visible()
        expect(page.get_by_text(re.compile("^(Suggested peak lr|No suggestion)")).first).to_be_visible(
            timeout=300_000)
        expect(button).to_be_enabled()  # nothing else touched: the page redrew itself when the test ended


def test_the_branch_forms_checkpoint_stays_ticked_when_the_checkpoint_is_rewritten(server, tmp_path):
    import torch

    [run] = list_runs(server.log_path.parent / "runs")
    with browser_page(tmp_path / "last.png", T) as page:
        page.goto(server.url)
        open_expander(page, "Branch from here")
        radios = page.get_by_role("radio")
        expect(radios.first).to_be_checked()
        last = torch.load(run.last_ckpt, weights_only=True)  # the run resumed and saved again, elsewhere
        torch.save({**last, "step": last["step"] + 41, "epoch": last["epoch"] + 1}, run.last_ckpt)
        page.get_by_text("Log scale (loss)").click()  # any rerun of the page
        expect(page.get_by_text(f"epoch {last['epoch'] + 1}, step {last['step'] + 41}")).to_be_visible()
        expect(radios.first).to_be_checked()
