"""A freshly started server's very first request, straight to a page's URL, shows that page.

With a `pages/` folder Streamlit 1.67 starts in its classic multipage mode until the first
`st.navigation` call (ui/navigation.py says why and how the pages handle it). Each case here starts
its own server, so the URL under test is the first request that server ever gets.
"""

from __future__ import annotations

import pytest
from browser_server import launch_chromium, require_browser, start_server, stop_server

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    expect = sync_playwright = None

pytestmark = pytest.mark.browser
require_browser()

T = 90_000  # ms


@pytest.mark.parametrize(("path", "heading", "text"), [
    ("/predict", "Draw a digit", "No checkpoint yet"),
    ("/runs", "Runs", "No runs yet"),
    ("/", "Train a recurrent network", "No runs yet"),
])
def test_first_request_to_a_fresh_server_shows_that_page(tmp_path, path, heading, text):
    server = start_server(tmp_path / "runs", tmp_path / "data", tmp_path / "server.log")
    try:
        with sync_playwright() as pw:
            browser = launch_chromium(pw)
            page = browser.new_page()
            page.goto(server.url + path)
            expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=T)
            expect(page.get_by_text(text).first).to_be_visible(timeout=T)
            # Our navigation, not the classic one built from file names: labels, icons, lower-case URLs.
            nav = page.get_by_test_id("stSidebarNav")
            for label, icon, href in (("Train", "model_training", "/"), ("Predict", "draw", "/predict"),
                                      ("Runs", "table_chart", "/runs")):
                link = nav.get_by_role("link", name=label)
                expect(link).to_be_visible(timeout=T)
                assert link.get_attribute("href").rstrip("/").endswith(href.rstrip("/")) or href == "/"
                expect(link).to_contain_text(icon)  # Material icons render as their ligature name
            expect(nav).not_to_contain_text("streamlit app")
            # The next page works on the same session (the server has left classic mode).
            nav.get_by_role("link", name="Runs" if path != "/runs" else "Predict").click()
            expect(page.get_by_role("heading", name="Runs" if path != "/runs" else "Draw a digit")).to_be_visible(
                timeout=T)
            browser.close()
    finally:
        stop_server(server)
