"""The dashboard as a real server on a free port, and Debian's Chromium to drive it through Playwright.

Shared by the browser benchmarks and the browser tests (tests/browser_server.py builds on it). Never runs
`playwright install`: the browser is the system's /usr/bin/chromium (or $BRNN_CHROMIUM).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("BRNN_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 1000}


def loopback_opener() -> urllib.request.OpenerDirector:
    """An opener that goes straight to this machine's own ports. urlopen's shared opener keeps whatever proxy the
    environment named when it was first used in the process, and a proxy never reaches 127.0.0.1."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """A localhost port with nothing listening: connections are refused at once until someone binds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    """The dashboard as `make run` starts it (`python -m ui.serve`) on a free port, in its own process group;
    waits for /_stcore/health.

    `env` adds variables to the server's environment (its training workers inherit them)."""
    port = free_port()
    env = {**os.environ, "BRNN_RUNS_DIR": str(runs_dir), "BRNN_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1",
           **(env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ui.serve", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    server = Server(proc, port, log_path)
    opener = loopback_opener()
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the dashboard exited with code {proc.returncode}:\n{server.log()}")
        try:
            with opener.open(f"{server.url}/_stcore/health", timeout=5) as response:
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
