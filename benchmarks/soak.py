"""Soak test: the dashboard in a real browser, runs started and stopped for N minutes.

    .venv/bin/python -m benchmarks.soak --minutes 30

Starts the dashboard with a fresh runs folder, and in Chromium (Playwright) starts a small run, stops it after a few
seconds, waits for it to end, reloading the page every few cycles; the server's RSS is sampled throughout. At the
end it lists orphan and zombie workers. Prints a report (--json FILE too); exits non-zero only when something is
broken (orphans, no completed cycle).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect, sync_playwright

from benchmarks.browser import loopback_opener
from brnn_core.runs.rundir import list_runs
from brnn_core.states import ACTIVE_STATES

REPO = Path(__file__).resolve().parent.parent

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(port: int) -> bool:
    opener = loopback_opener()
    try:
        with opener.open(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as response:
            return response.read() == b"ok"
    except OSError:
        return False


class RssSampler(threading.Thread):
    """Samples the server's resident memory every `every` seconds."""

    def __init__(self, pid: int, every: float):
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.every = every
        self.samples: list[tuple[float, int]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.stop_event.is_set():
            with contextlib.suppress(psutil.Error):
                self.samples.append((time.monotonic() - t0, self.proc.memory_info().rss))
            self.stop_event.wait(self.every)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


def worker_processes(runs_dir: Path) -> list[psutil.Process]:
    """Live `python -m brnn_core train` processes working on a run in runs_dir."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if "brnn_core" in cmd and "train" in cmd and any(str(runs_dir) in part for part in cmd):
            found.append(proc)
    return found


def describe(procs: list[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            out.append(f"pid {proc.pid} ({proc.status()}): {' '.join(proc.cmdline())[:160]}")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to keep starting and stopping runs")
    parser.add_argument("--hidden-size", type=int, default=16, help="model size typed into the form")
    parser.add_argument("--train-seconds", type=float, nargs=2, default=(2.0, 8.0), metavar=("MIN", "MAX"),
                        help="how long each run trains before Stop is clicked (random in this range)")
    parser.add_argument("--reload-every", type=int, default=5, help="reload the page every N cycles (0: never)")
    parser.add_argument("--sample-every", type=float, default=2.0, help="seconds between RSS samples")
    parser.add_argument("--worker-threads", default="1", help="OMP_NUM_THREADS for the workers (small machines)")
    parser.add_argument("--runs-dir", type=Path, help="runs folder (default: a fresh temporary one, removed)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def start_dashboard(port: int, env: dict[str, str], log) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.headless",
                             "true", "--server.port", str(port), "--server.address", "127.0.0.1"],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(server: subprocess.Popen, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + 240
    while not healthy(port):
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the dashboard did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)


def open_train_page(page, url: str, hidden_size: int) -> None:
    """Load the Train page (a new browser session) and type the small model into the form."""
    page.goto(url, wait_until="domcontentloaded")
    expect(page.get_by_role("button", name="Start training").filter(visible=True)).to_be_visible(timeout=120_000)
    for label, value in (("Hidden size", hidden_size), ("LSTM layers", 1)):
        box = page.get_by_label(label, exact=True).filter(visible=True)
        if box.is_enabled() and box.input_value() != str(value):
            box.fill(str(value))
            box.press("Enter")
    page.wait_for_timeout(500)


def one_cycle(page, runs_dir: Path, seconds: tuple[float, float], rng: random.Random, report: dict) -> None:
    """Start a run, let it train (a random time in `seconds`), stop it, wait for it to end; a broken page raises."""
    # (visible: Streamlit may keep a zero-size copy of a re-drawn button in the page)
    start = page.get_by_role("button", name="Start training").filter(visible=True)
    stop = page.get_by_role("button", name="Stop", exact=True).filter(visible=True)
    expect(start).to_be_enabled(timeout=120_000)
    start.click()
    expect(stop).to_be_enabled(timeout=120_000)  # the run exists and is active
    page.wait_for_timeout(int(1000 * rng.uniform(*seconds)))
    if stop.is_enabled():  # (a short run may have finished by itself)
        try:
            stop.click(timeout=10_000)
        except PlaywrightError:
            # The run can end between the check and the click; Stop is then disabled and
            # the click rightly waits in vain. Only a Stop stuck while the run trains fails.
            if list_runs(runs_dir)[0].status().get("state") in ACTIVE_STATES:
                raise
            report["stop_raced_run_end"] = report.get("stop_raced_run_end", 0) + 1
    expect(start).to_be_enabled(timeout=180_000)  # the run ended: stopped or finished


def cycle_until(page, url: str, args: argparse.Namespace, runs_dir: Path, tmp: Path, report: dict) -> None:
    """Start/stop cycles until --minutes are up (or 20 failures), reloading the page every --reload-every."""
    rng = random.Random(args.seed)
    end = time.monotonic() + args.minutes * 60
    while time.monotonic() < end:
        cycle = report["cycles"] + len(report["failures"]) + 1
        try:
            one_cycle(page, runs_dir, args.train_seconds, rng, report)
            report["cycles"] += 1
        except (PlaywrightError, AssertionError) as exc:  # a timeout, or two visible copies of a button
            report["failures"].append(f"cycle {cycle}: {str(exc).splitlines()[0][:200]}")
            with contextlib.suppress(Exception):
                page.screenshot(path=str(tmp / f"failure-{cycle}.png"))
            if len(report["failures"]) >= 20:
                report["failures"].append("gave up after 20 failures")
                break
            with contextlib.suppress(PlaywrightError, AssertionError):
                open_train_page(page, url, args.hidden_size)
            continue
        if args.reload_every and report["cycles"] % args.reload_every == 0:
            open_train_page(page, url, args.hidden_size)  # a fresh browser session on the same server
            report["reloads"] += 1


def wind_down(server: subprocess.Popen, runs_dir: Path, report: dict) -> None:
    """No run may stay active; then what the server left behind: zombie and live workers."""
    wait_end = time.monotonic() + 180
    while any(r.status().get("state") in ACTIVE_STATES for r in list_runs(runs_dir)):
        if time.monotonic() > wait_end:
            report["failures"].append("a run was still active three minutes after the last Stop")
            break
        time.sleep(1)
    time.sleep(2)
    zombies = [c for c in psutil.Process(server.pid).children(recursive=True) if c.status() == psutil.STATUS_ZOMBIE]
    report["zombie_workers_before_server_stop"] = describe(zombies)
    report["live_workers_before_server_stop"] = describe(
        [p for p in worker_processes(runs_dir) if p.status() != psutil.STATUS_ZOMBIE])


def stop_dashboard(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)


def soak(server: subprocess.Popen, port: int, args: argparse.Namespace, runs_dir: Path, tmp: Path,
         report: dict) -> RssSampler | None:
    """The browser part: open the Train page, sample the server's RSS, cycle, wind down; returns the sampler."""
    sampler = None
    try:
        wait_healthy(server, port, tmp / "server.log")
        report["rss_mb_idle_server"] = round(psutil.Process(server.pid).memory_info().rss / 2**20, 1)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            url = f"http://127.0.0.1:{port}/"
            open_train_page(page, url, args.hidden_size)
            sampler = RssSampler(server.pid, args.sample_every)  # from the first page view (torch loaded)
            sampler.start()
            cycle_until(page, url, args, runs_dir, tmp, report)
            browser.close()
        wind_down(server, runs_dir, report)
    finally:
        if sampler is not None:
            sampler.stop()
    return sampler


def finish_report(report: dict, runs_dir: Path, sampler: RssSampler | None) -> list[psutil.Process]:
    """Orphans, the runs' states and the RSS statistics into `report`; returns the orphan workers."""
    time.sleep(1)
    orphans = [p for p in worker_processes(runs_dir) if p.status() != psutil.STATUS_ZOMBIE]
    report["orphan_workers"] = describe(orphans)
    runs = list_runs(runs_dir)
    states: dict[str, int] = {}
    for run in runs:
        state = run.status().get("state")
        states[state] = states.get(state, 0) + 1
    report["runs_created"] = len(runs)
    report["run_states"] = states
    rss = [r for _, r in (sampler.samples if sampler else [])]
    mb = lambda b: round(b / 2**20, 1)  # noqa: E731
    if rss:
        report["rss_mb"] = {"first": mb(rss[0]), "last": mb(rss[-1]), "max": mb(max(rss)),
                            "median": mb(statistics.median(rss)), "samples": len(rss)}
        tail = rss[len(rss) // 2:]
        report["rss_mb"]["second_half_growth"] = mb(tail[-1] - tail[0]) if len(tail) > 1 else 0.0
    return orphans


def print_report(report: dict) -> None:
    print(f"soak: {report['elapsed_s']:.0f}s, {report['cycles']} start/stop cycles, {report['reloads']} page reloads, "
          f"{report['runs_created']} runs {report['run_states']}")
    if "rss_mb" in report:
        r = report["rss_mb"]
        print(f"server RSS (MB): first {r['first']}, last {r['last']}, max {r['max']}, median {r['median']} "
              f"({r['samples']} samples from the first page view; growth over the second half "
              f"{r['second_half_growth']}; idle server before any page {report['rss_mb_idle_server']})")
    print(f"failures: {len(report['failures'])}" + "".join(f"\n  {f}" for f in report["failures"]))
    if report.get("stop_raced_run_end"):
        print(f"Stop clicked as the run finished by itself (button already disabled, not a failure): "
              f"{report['stop_raced_run_end']}")
    print(f"zombie workers before the server stopped: {report.get('zombie_workers_before_server_stop') or 'none'}")
    print(f"orphan worker processes: {report['orphan_workers'] or 'none'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="brnn-soak-"))
    runs_dir = (args.runs_dir or tmp / "runs").resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = dict(os.environ, BRNN_RUNS_DIR=str(runs_dir), BRNN_DATA_DIR=str(tmp / "data"),
               OMP_NUM_THREADS=args.worker_threads, PYTHONUNBUFFERED="1")
    report: dict = {"minutes": args.minutes, "port": port, "runs_dir": str(runs_dir), "cycles": 0, "failures": [],
                    "reloads": 0}
    t_start = time.monotonic()
    with open(tmp / "server.log", "ab") as log:  # the server writes here for its whole life
        server = start_dashboard(port, env, log)
        sampler = None
        try:
            sampler = soak(server, port, args, runs_dir, tmp, report)
        finally:
            stop_dashboard(server)
    orphans = finish_report(report, runs_dir, sampler)
    report["elapsed_s"] = round(time.monotonic() - t_start, 1)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    for orphan in orphans:  # leave the machine clean
        with contextlib.suppress(psutil.Error):
            orphan.kill()
    if report["failures"] or orphans:
        print(f"screenshots and server log kept in {tmp}")
    elif not args.runs_dir:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if orphans or not report["cycles"] else 0


if __name__ == "__main__":
    sys.exit(main())
