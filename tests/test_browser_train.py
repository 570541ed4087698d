"""Train page behaviour that only a browser shows, on a real server: fragments that rerun on their own.

Find a learning rate: while its test runs only the result's fragment reruns (every second); when the test ends
the button, outside that fragment, must be usable again without touching anything else on the page.

Skipped without Chromium unless BRNN_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import re

import pytest
from browser_server import browser_page, require_browser, start_server, stop_server

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
def server(idx_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("train-walk")
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
        expect(page.get_by_role("heading", name="Train a bidirectional LSTM")).to_be_visible()
        enter(page, "Hidden size", "16")
        enter(page, "LSTM layers", "1")
        button = page.get_by_role("button", name="Find a learning rate")
        button.click()
        expect(page.get_by_text(re.compile("^Learning-rate range test:")).first).to_be_visible()
        expect(page.get_by_text(re.compile("^(Suggested peak lr|No suggestion)")).first).to_be_visible(
            timeout=300_000)
        expect(button).to_be_enabled()  # nothing else touched: the page redrew itself when the test ended
