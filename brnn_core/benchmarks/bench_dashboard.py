"""The *dashboard* and *history* rows: the dashboard's own costs, measured by scripts in bench/.

Both need Streamlit (and the first one Chromium), which brnn_core never imports, so they run as
subprocesses and their JSON becomes rows:

  dashboard  bench/dashboard_overhead.py: the same run from the CLI and from the Train page while
             Chromium streams it, alternated; target ratio >= 0.9
  history    bench/history.py: N valid runs in the folder (100, 1,000, 5,000); runs_table, the
             RunIndex, every page's first render and rerun (AppTest, server time) and a stroke
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from brnn_core.benchmarks.child import CHECKOUT
from brnn_core.benchmarks.context import Context
from brnn_core.benchmarks.rows import Row, ratio_row, throughput_row

CHROMIUM = Path("/usr/bin/chromium")
HISTORY_TARGETS = {"rerun": 0.2, "runs page first render": 1.0, "predict stroke": 0.1}  # seconds, at 1,000 runs


def run_script(ctx: Context, args: list[str], out: Path, timeout: float) -> dict:
    proc = subprocess.run([sys.executable, *args, "--json", str(out)], cwd=CHECKOUT, capture_output=True, text=True,
                          timeout=timeout)
    for line in proc.stdout.splitlines()[-30:]:
        ctx.log(line)
    if proc.returncode:
        raise RuntimeError(f"{args[0]} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
    return json.loads(out.read_text())


def bench_dashboard(ctx: Context) -> list[Row]:
    if not CHROMIUM.is_file():
        return [Row("dashboard", "skipped: no Chromium", "ratio", float("nan"), "x",
                    note=f"{CHROMIUM} not found (apt-get install chromium)")]
    s = ctx.sizes
    out = run_script(ctx, ["bench/dashboard_overhead.py", "--repeats", str(s.dashboard_repeats), "--epochs",
                           str(s.dashboard_epochs)], ctx.workdir / "dashboard.json", timeout=3600)
    cli = [r["samples_per_s"] for r in out["runs"] if r["mode"] == "cli"]
    dash = [r["samples_per_s"] for r in out["runs"] if r["mode"] == "dashboard"]
    what = f"{out['config']['epochs']}-epoch {out['config']['dataset']} runs, default settings"
    return [throughput_row("dashboard", "run from the CLI", cli, what),
            throughput_row("dashboard", "run from the Train page, Chromium streaming it", dash,
                           f"server + Chromium used {out['dashboard_cpu_cores_while_training']:.2f} cores meanwhile"),
            ratio_row("dashboard", "dashboard / CLI", dash, cli, target=0.9, note="alternated")]


def bench_history(ctx: Context) -> list[Row]:
    sizes = ",".join(str(n) for n in ctx.sizes.history_runs)
    out = run_script(ctx, ["bench/history.py", "--runs", sizes], ctx.workdir / "history.json", timeout=3600)
    rows = []
    for n, timings in out["sizes"].items():
        load = timings.pop("load_1min")
        for case, seconds in timings.items():
            row = Row("history", f"{int(n):,} runs: {case}", "time", 1000 * seconds, "ms",
                      note=f"load {load[0]} -> {load[1]}")
            limit = next((t for k, t in HISTORY_TARGETS.items() if k in case), None)
            if int(n) == 1000 and limit is not None and ("first render" not in case or "runs page" in case):
                row.target, row.met = f"<= {1000 * limit:g}", "yes" if seconds <= limit else "no"
            rows.append(row)
    return rows
