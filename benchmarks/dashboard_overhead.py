"""Does watching a run in the dashboard slow training down? CLI run vs dashboard run, same config, alternated.

    .venv/bin/python -m benchmarks.dashboard_overhead [--repeats 3] [--epochs 2] [--threads N] [--json FILE]

(a) `python -m brnn_core train` while the browser shows about:blank; (b) the same config started from the Train
page in Chromium (Playwright, /usr/bin/chromium), which streams the live charts until the run ends. A run's
throughput is the median of its logged samples/s after the first log. Prints every run, each mode's median, the
ratio dashboard/CLI (target >= 0.9) and the cores the server and Chromium use meanwhile; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from playwright.sync_api import expect, sync_playwright

from benchmarks.browser import CHROMIUM, VIEWPORT, launch_chromium, start_server, stop_server
from brnn_core.runs.rundir import Run, list_runs

REPO = Path(__file__).resolve().parent.parent

RESULTS = REPO / "benchmarks" / "results" / "dashboard_overhead.json"
DATASET = "mnist-sample"


def throughput(run: Run) -> dict:
    metrics = run.metrics()
    train = metrics[metrics["split"] == "train"]
    rates = [float(v) for v in train["samples_per_s"].iloc[1:] if v == v]  # drop the first log and NaNs
    status = run.status()
    return {"run_id": run.id, "state": status.get("state"), "logs": len(train),
            "samples_per_s": statistics.median(rates) if rates else None,
            "train_seconds": float(train["elapsed_s"].iloc[-1]) if len(train) else None,
            "all_logs_samples_per_s": [round(float(v), 1) for v in train["samples_per_s"]]}


def new_run(runs_dir: Path, before: set[str]) -> Run:
    runs = [r for r in list_runs(runs_dir) if r.id not in before]
    if len(runs) != 1:
        raise RuntimeError(f"expected one new run in {runs_dir}, found {[r.id for r in runs]}")
    return runs[0]


def cli_run(runs_dir: Path, data_dir: Path, epochs: int, extra_env: dict[str, str]) -> Run:
    before = {r.id for r in list_runs(runs_dir)}
    env = {**os.environ, "BRNN_RUNS_DIR": str(runs_dir), "BRNN_DATA_DIR": str(data_dir), "BRNN_PROGRESS": "plain",
           **extra_env}
    proc = subprocess.run([sys.executable, "-m", "brnn_core", "train", "--set", f"epochs={epochs}",
                           "--set", f"dataset={DATASET}"], cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"CLI training failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return new_run(runs_dir, before)


def cpu_seconds(server_pid: int) -> dict[str, float]:
    """CPU time used so far by the Streamlit server process itself and by this script's Chromium processes."""
    def used(proc) -> float:
        try:
            t = proc.cpu_times()
            return t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return 0.0

    browser = [c for c in psutil.Process().children(recursive=True) if "chrom" in c.name().lower()]
    return {"server": used(psutil.Process(server_pid)), "browser": sum(used(c) for c in browser)}


def dashboard_run(page, url: str, runs_dir: Path, epochs: int, server_pid: int,
                  timeout_s: float = 1800) -> tuple[Run, dict]:
    """Open the Train page, set Epochs, click Start training, keep the page open until the run ends.

    Returns the run and the CPU seconds the server and Chromium used from the click to the end of the run
    (`seconds` long: the worker's start-up and data loading included)."""
    before = {r.id for r in list_runs(runs_dir)}
    page.goto(url)
    epochs_field = page.get_by_role("spinbutton", name="Epochs")
    expect(epochs_field).to_be_enabled(timeout=120_000)
    expect(page.get_by_role("combobox", name="Dataset")).to_have_value(re.compile("MNIST sample"), timeout=120_000)
    epochs_field.fill(str(epochs))
    epochs_field.press("Enter")
    cpu0, t0 = cpu_seconds(server_pid), time.monotonic()
    page.get_by_role("button", name="Start training").click()
    deadline = time.monotonic() + 120
    while not [r for r in list_runs(runs_dir) if r.id not in before]:
        if time.monotonic() > deadline:
            raise RuntimeError("the dashboard did not start a run")
        time.sleep(0.2)
    run = new_run(runs_dir, before)
    # The page streams the live charts all along; wait for the worker to finish (polling the run dir).
    deadline = time.monotonic() + timeout_s
    while run.status().get("state") not in ("finished", "failed", "diverged", "interrupted", "stopped"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run.id} did not finish within {timeout_s:.0f}s")
        time.sleep(0.5)
    cpu1, seconds = cpu_seconds(server_pid), time.monotonic() - t0
    # Still streaming at the end? The page must show the final state (it redrew throughout).
    expect(page.get_by_text(run.id).first).to_be_visible(timeout=60_000)
    page.goto("about:blank")  # nothing watches between runs
    if run.status().get("state") != "finished":
        raise RuntimeError(f"dashboard run {run.id} ended {run.status().get('state')}: {run.status().get('message')}")
    if run.config()["train"]["epochs"] != epochs:
        raise RuntimeError(f"dashboard run {run.id} has epochs={run.config()['train']['epochs']}, wanted {epochs}")
    return run, {**{k: round(cpu1[k] - cpu0[k], 2) for k in cpu0}, "seconds": round(seconds, 1)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each kind (alternated)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS for both kinds of run (default: torch's own choice, one per core)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def one_run(mode: str, i: int, args: argparse.Namespace, folders: dict[str, Path], page, server,
            extra_env: dict[str, str]) -> dict:
    """Train once from the CLI or from the dashboard; the run's row (its throughput, wall time, machine load)."""
    t0 = time.time()
    load = os.getloadavg()[0]
    if mode == "cli":
        run, cpu = cli_run(folders["cli"], folders["data"], args.epochs, extra_env), None
    else:
        run, cpu = dashboard_run(page, server.url, folders["dashboard"], args.epochs, server.proc.pid)
    row = {"mode": mode, "round": i + 1, **throughput(run), "wall_s": round(time.time() - t0, 1),
           "load_1min_at_start": round(load, 2)}
    if cpu is not None:
        row["dashboard_cpu_s"] = cpu  # server + Chromium while it trained
    print(f"{mode:>9} #{i + 1}: {row['samples_per_s']:8.1f} samples/s  "
          f"({row['logs']} logs, {row['train_seconds']:.1f}s training, {row['wall_s']:.1f}s wall, "
          f"load {load:.2f})" + (f", dashboard CPU {row['dashboard_cpu_s']}" if mode == "dashboard" else ""),
          flush=True)
    return row


def measure(args: argparse.Namespace, root: Path) -> list[dict]:
    """The alternated runs (cli, dashboard, cli, ...), with one server and one browser page for all of them."""
    folders = {"cli": root / "cli-runs", "dashboard": root / "dashboard-runs", "data": root / "data"}
    for d in folders.values():
        d.mkdir()
    results: list[dict] = []
    extra_env = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}
    server = start_server(folders["dashboard"], folders["data"], root / "server.log", env=extra_env)  # workers too
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_context(viewport=VIEWPORT).new_page()
            try:
                for i in range(args.repeats):
                    for mode in ("cli", "dashboard"):
                        results.append(one_run(mode, i, args, folders, page, server, extra_env))
            finally:
                browser.close()
    finally:
        stop_server(server)
    return results


def summarize(results: list[dict], args: argparse.Namespace, load_before: tuple[float, ...]) -> dict:
    cli = statistics.median(r["samples_per_s"] for r in results if r["mode"] == "cli")
    dash = statistics.median(r["samples_per_s"] for r in results if r["mode"] == "dashboard")
    ratio = dash / cli
    dash_cpu = [r["dashboard_cpu_s"] for r in results if r["mode"] == "dashboard"]
    return {
        "config": {"dataset": DATASET, "epochs": args.epochs, "omp_num_threads": args.threads,
                   "other": "TrainConfig defaults (hidden 128, 2 layers, batch 100, adam, lr 0.01, log every 10)"},
        "cli_samples_per_s": round(cli, 1), "dashboard_samples_per_s": round(dash, 1),
        "ratio_dashboard_over_cli": round(ratio, 3), "within_10_percent": ratio >= 0.9,
        "dashboard_cpu_cores_while_training": round(sum(c["server"] + c["browser"] for c in dash_cpu)
                                                    / sum(c["seconds"] for c in dash_cpu), 3),
        "runs": results,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "note": "median of each run's train-row samples_per_s without the first log; modes alternated; "
                "shared machine, so expect noise of the order of the per-run spread",
    }


def report(summary: dict, repeats: int, path: Path) -> None:
    """Print the summary and write it (atomically) to `path`."""
    print(f"\nCLI (no dashboard): {summary['cli_samples_per_s']:8.1f} samples/s (median of {repeats} runs)")
    print(f"dashboard + browser: {summary['dashboard_samples_per_s']:8.1f} samples/s (median of {repeats} runs)")
    print(f"ratio dashboard/CLI: {summary['ratio_dashboard_over_cli']:.3f} "
          f"({'within' if summary['within_10_percent'] else 'NOT within'} 10%)")
    print(f"dashboard CPU (server + Chromium) while a run trains: "
          f"{summary['dashboard_cpu_cores_while_training']:.2f} cores (of {os.cpu_count()})")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(path)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not CHROMIUM.is_file():
        print(f"error: {CHROMIUM} not found (apt-get install chromium)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="brnn-overhead-"))
    load_before = os.getloadavg()
    try:
        results = measure(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(summarize(results, args, load_before), args.repeats, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
