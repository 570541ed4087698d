"""A freshly started server's very first request, straight to a page's URL, shows that page.

With a `pages/` folder Streamlit 1.67 starts in its classic multipage mode until the first
`st.navigation` call (ui/navigation.py says why and how the pages handle it). Each case here starts
its own server, so the URL under test is the first request that server ever gets.
"""

from __future__ import annotations

import re

import pytest
from browser_server import launch_chromium, require_browser, start_server, stop_server

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    expect = sync_playwright = None

pytestmark = pytest.mark.browser
require_browser()

T = 90_000  # ms


@pytest.fixture(scope="module")
def chromium():
    """One browser for the file: each test's page is a context of its own (no cookies, no session) on a server of
    its own, so the first request stays that server's first; only Chromium's start is shared."""
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        yield browser
        browser.close()


@pytest.mark.parametrize(("path", "heading", "text"), [
    ("/predict", "Draw a digit", "No checkpoint yet"),
    ("/runs", "Runs", "No runs yet"),
    ("/compare", "Compare", "0 of 18 runs done"),  # the defaults' matrix: 3 cells x 2 directions x 3 seeds
    ("/", "Train a recurrent network", "No runs yet"),
])
def test_first_request_to_a_fresh_server_shows_that_page(tmp_path, chromium, path, heading, text):
    server = start_server(tmp_path / "runs", tmp_path / "data", tmp_path / "server.log")
    try:
        with chromium.new_page() as page:
            page.goto(server.url + path)
            expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=T)
            expect(page.get_by_text(text).first).to_be_visible(timeout=T)
            # Our navigation, not the classic one built from file names: labels, icons, lower-case URLs.
            nav = page.get_by_test_id("stSidebarNav")
            for label, icon, href in (("Train", "model_training", "/"), ("Predict", "draw", "/predict"),
                                      ("Runs", "table_chart", "/runs"), ("Compare", "compare_arrows", "/compare")):
                link = nav.get_by_role("link", name=label)
                expect(link).to_be_visible(timeout=T)
                assert link.get_attribute("href").rstrip("/").endswith(href.rstrip("/")) or href == "/"
                expect(link).to_contain_text(icon)  # Material icons render as their ligature name
            expect(nav).not_to_contain_text("streamlit app")
            # The next page works on the same session (the server has left classic mode).
            nav.get_by_role("link", name="Runs" if path != "/runs" else "Predict").click()
            expect(page.get_by_role("heading", name="Runs" if path != "/runs" else "Draw a digit")).to_be_visible(
                timeout=T)
    finally:
        stop_server(server)


def test_train_has_its_own_address_too(tmp_path, chromium):
    """Train lives at /; /train (what the page is called) shows it too, on a server's first request and on a later
    one, with its query (?run=ID)."""
    server = start_server(tmp_path / "runs", tmp_path / "data", tmp_path / "server.log")
    try:
        for path in ("/train", "/train?run=20261203-101010-mnist-sample-abcd"):  # the first request, a later one
            with chromium.new_page() as page:
                page.goto(server.url + path)
                expect(page.get_by_role("heading", name="Train a recurrent network")).to_be_visible(timeout=T)
                expect(page).to_have_url(re.compile(re.escape(server.url) + r"/(train)?" + re.escape(path[6:]) + "$"),
                                         timeout=T)
                expect(page.get_by_text("Page not found")).to_have_count(0)
    finally:
        stop_server(server)


def test_nothing_a_page_loads_comes_from_outside_the_machine(tmp_path, chromium, finished):
    """Every request and websocket of every page, with a run to show and a digit drawn, goes to 127.0.0.1 (the tab
    icon included: a Material page icon would be fetched from a font CDN)."""
    from urllib.parse import urlparse

    from browser_helpers import draw_stroke
    from helpers import copy_run

    copy_run(finished, tmp_path / "runs")
    server = start_server(tmp_path / "runs", tmp_path / "data", tmp_path / "server.log")
    seen: list[str] = []
    try:
        with chromium.new_page() as page:
            page.on("request", lambda request: seen.append(request.url))
            page.on("websocket", lambda ws: seen.append(ws.url))
            for path, heading in (("/", "Train a recurrent network"), ("/predict", "Draw a digit"),
                                  ("/runs", "Runs"), ("/sweep", "Sweep")):
                page.goto(server.url + path)
                expect(page.get_by_role("heading", name=heading).first).to_be_visible(timeout=T)
                if path == "/predict":
                    draw_stroke(page, [(140, 40), (140, 240)])
                    expect(page.get_by_text("Class probabilities").first).to_be_visible(timeout=T)
                page.wait_for_load_state("networkidle", timeout=T)
    finally:
        stop_server(server)
    outside = sorted({url for url in seen if urlparse(url).scheme not in ("data", "blob")
                      and urlparse(url).hostname != "127.0.0.1"})
    assert len(seen) > 20 and not outside, outside
