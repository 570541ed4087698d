"""Chromium pages and screenshots for the browser tests, on top of benchmarks.browser (the real server).

Used by the tests/test_browser*.py files; the server and the browser launch are shared with the benchmarks.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path

import pytest
from helpers import REPO

from benchmarks.browser import CHROMIUM, VIEWPORT, Server, launch_chromium, start_server, stop_server

__all__ = ["CHROMIUM", "VIEWPORT", "Server", "browser_page", "launch_chromium", "require_browser", "screenshot",
           "start_server", "stop_server", "unavailable"]


def unavailable(reason: str) -> None:
    """Skip the calling browser test module, or fail it under BRNN_REQUIRE_BROWSER=1 (CI: a missing browser is a
    failure, not a skip)."""
    if os.environ.get("BRNN_REQUIRE_BROWSER") == "1":
        pytest.fail(f"BRNN_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_browser() -> None:
    """Call at a browser test module's top: `unavailable` without Chromium or the playwright package."""
    if not CHROMIUM.is_file() or importlib.util.find_spec("playwright") is None:
        unavailable(f"{CHROMIUM} or the playwright package is missing")


@contextlib.contextmanager
def browser_page(last_shot: Path, timeout_ms: float):
    """A Chromium page (VIEWPORT, `timeout_ms` for every wait); its last state is saved to `last_shot`
    whatever happens, for debugging a failure."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(timeout_ms)
        pg = context.new_page()
        try:
            yield pg
        finally:
            last_shot.parent.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(last_shot), full_page=True)
            context.close()
            browser.close()


MAX_SHOT_HEIGHT = 2400


def screenshot(page, name: str, folder: Path) -> Path:
    """A PNG of the whole page (up to MAX_SHOT_HEIGHT px tall), saved as folder/name.png.

    Streamlit scrolls inside <main data-testid=stMain>, so Playwright's full_page sees only the viewport:
    the viewport is stretched to the content for the shot, then restored. With BRNN_UPDATE_SCREENSHOTS=1
    the PNG is also copied to docs/screenshots/ (the README's images).
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    size = page.viewport_size or VIEWPORT
    height = page.evaluate("() => { const m = document.querySelector('[data-testid=stMain]');"
                           " return m ? m.scrollHeight : document.body.scrollHeight; }")
    height = max(size["height"], min(int(height), MAX_SHOT_HEIGHT))
    try:
        if height != size["height"]:
            page.set_viewport_size({"width": size["width"], "height": height})
            page.wait_for_timeout(500)  # layout and chart redraw at the new size (cosmetic only)
        page.screenshot(path=str(path))
    finally:
        if height != size["height"]:
            page.set_viewport_size(size)
    if os.environ.get("BRNN_UPDATE_SCREENSHOTS") == "1":
        docs = REPO / "docs" / "screenshots"
        docs.mkdir(parents=True, exist_ok=True)
        (docs / path.name).write_bytes(path.read_bytes())
    return path
