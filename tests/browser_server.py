"""Start the dashboard as a real server and drive it with Debian's Chromium through Playwright.

Used by tests/test_browser.py and bench/dashboard_overhead.py. Never runs `playwright install`:
the browser is the system's /usr/bin/chromium.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from helpers import REPO, free_port

CHROMIUM = Path(os.environ.get("BRNN_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 1000}


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


def start_server(runs_dir: Path, data_dir: Path, log_path: Path, *, timeout: float = 120.0,
                 env: dict[str, str] | None = None) -> Server:
    """`streamlit run streamlit_app.py` on a free port, in its own process group; waits for /_stcore/health.

    `env` adds variables to the server's environment (its training workers inherit them)."""
    port = free_port()
    env = {**os.environ, "BRNN_RUNS_DIR": str(runs_dir), "BRNN_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1",
           **(env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    server = Server(proc, port, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the dashboard exited with code {proc.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=5) as response:
                if response.read().decode().strip() == "ok":
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(f"the dashboard did not answer /_stcore/health within {timeout:.0f}s:\n{server.log()}")
        time.sleep(0.25)


def stop_server(server: Server) -> None:
    """SIGTERM the server's whole process group, then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.proc.pid, signal.SIGTERM)
    try:
        server.proc.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait(15)


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)


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
