"""A fresh server's first contact: how soon the first page says something, shows its title, and has the default
dataset's training digits drawn as canvas strokes (in the background) for the first run.

    .venv/bin/python -m benchmarks.first_contact [--repeats 3] [--page /] [--json FILE]

Each repeat starts the dashboard as `make run` does on empty runs, data and cache folders and opens `page` in
Chromium. Prints each repeat's seconds from the browser's request: the "Starting up" message, the page title,
and the end of the background drawing (None on a page other than Train, which alone shows its progress).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from benchmarks.browser import VIEWPORT, launch_chromium, start_server, stop_server


def once(page_path: str) -> dict[str, float | None]:
    root = Path(tempfile.mkdtemp(prefix="first-contact-"))
    (root / "runs").mkdir()
    env = {"BRNN_CACHE_DIR": str(root / "cache")}  # nothing drawn yet, as on a fresh machine
    server = start_server(root / "runs", root / "data", root / "server.log", env=env)
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_context(viewport=VIEWPORT).new_page()
            t0 = time.perf_counter()
            page.goto(server.url + page_path)
            page.get_by_text("Starting up").first.wait_for(timeout=60_000)
            message = time.perf_counter() - t0
            page.locator("h1").first.wait_for(timeout=120_000)
            title = time.perf_counter() - t0
            drawn = None
            if page_path in ("", "/"):
                page.get_by_text("ready for its first run").first.wait_for(timeout=60_000)
                page.get_by_text("ready for its first run").first.wait_for(state="detached", timeout=300_000)
                drawn = time.perf_counter() - t0
            browser.close()
    finally:
        stop_server(server)
    return {"message_s": round(message, 2), "title_s": round(title, 2), "drawn_s": drawn and round(drawn, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_contact", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--page", default="/", help="the first page opened: / (Train), /predict, /runs, /sweep")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    os.environ.pop("BRNN_CACHE_DIR", None)
    rows = []
    for k in range(args.repeats):
        rows.append(once(args.page))
        print(f"repeat {k + 1}: {rows[-1]}", flush=True)
    summary = {key: statistics.median(r[key] for r in rows) if all(r[key] is not None for r in rows) else None
               for key in rows[0]}
    print(f"median: {summary}")
    if args.json:
        args.json.write_text(json.dumps({"page": args.page, "repeats": rows, "median": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
