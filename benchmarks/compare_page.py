"""The Compare page with hundreds of runs: first render and rerun times (AppTest, server time, no browser).

    .venv/bin/python -m benchmarks.compare_page --runs 300 [--reruns 7]

Writes N finished runs (ordinary run directories: 20 epochs of metrics, a gradient_flow.csv of 8 measurements, as
the defaults leave them on mnist-sample; no training) in two layouts and opens the Compare page on the matrix:
`history`, a 6-entry matrix of 3 seeds among N - 18 other runs (a long history), and `matrix`, all N runs in the
matrix (6 entries of N / 6 seeds: each band and gradient-flow panel averages N / 6 runs). Prints the first render
and the median rerun of each (a rerun: the live refresh, or any click). Target: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from brnn_core.config import CELL_NAMES, TrainConfig
from brnn_core.runs.gradient_flow import FILE as FLOW_FILE
from brnn_core.runs.gradient_flow import GradientFlowRecord, append_records
from brnn_core.runs.matrix import Matrix
from brnn_core.runs.rundir import create_run, new_run_config

ROOT = Path(__file__).resolve().parent.parent
EPOCHS, STEPS = 20, 41  # the defaults on mnist-sample: 20 epochs of 41 steps (batch 100)


def write_run(runs_dir: Path, cfg: TrainConfig, run_id: str, k: int) -> None:
    """A finished run of `cfg` with its metrics, status and (for a cell) gradient flow, as a real one leaves them."""
    run = create_run(runs_dir, new_run_config(cfg, runs_dir), run_id=run_id)
    for epoch in range(1, EPOCHS + 1):
        step = epoch * STEPS
        for s in range(step - STEPS + 10, step + 1, 10):
            run.log_metric(step=s, epoch=s / STEPS, split="train", loss=2.3 / (1 + s / 100) + 0.001 * k, lr=0.01,
                           samples_per_s=900.0, elapsed_s=s * 0.1)
        run.log_metric(step=step, epoch=epoch, split="val", loss=0.4 / epoch + 0.001 * k, accuracy=0.9 + epoch / 300,
                       lr=0.01, elapsed_s=step * 0.1)
    fade = {"lstm": 0.9, "gru": 0.85, "rnn": 0.5}[cfg.cell]
    directions = ("forward", "backward") if cfg.bidirectional else ("forward",)
    append_records(run.path / FLOW_FILE, [
        GradientFlowRecord(step, step / STEPS, layer, d, tuple(fade ** (27 - t if d == "forward" else t)
                                                              for t in range(28)))
        for step in range(0, EPOCHS * STEPS, 100) for layer in (1, 2) for d in directions])
    run.write_status(state="finished", message="finished", step=EPOCHS * STEPS, epoch=EPOCHS, elapsed_s=60.0,
                     ended=time.time(), test_acc=0.97)


def make_folder(runs_dir: Path, runs: int, layout: str) -> None:
    seeds = 3 if layout == "history" else runs // 6
    matrix = Matrix.build({"dataset": "mnist-sample", "device": "cpu"}, list(CELL_NAMES), [True, False],
                          list(range(seeds)))
    k = 0
    for entry in matrix.entries:
        for cfg in matrix.configs(entry):
            write_run(runs_dir, cfg, f"20261203-1{k // 60:02d}{k % 60:02d}-mnist-sample-m{k:03d}", k)
            k += 1
    for j in range(runs - k):  # the rest of the history: other settings
        cfg = TrainConfig(dataset="mnist-sample", device="cpu", lr=0.001 * (1 + j % 10), hidden_size=64, seed=j)
        write_run(runs_dir, cfg, f"20261202-1{j // 60:02d}{j % 60:02d}-mnist-sample-h{j:03d}", j)


def time_page(runs_dir: Path, reruns: int) -> tuple[float, list[float], int]:
    from streamlit.testing.v1 import AppTest

    os.environ["BRNN_RUNS_DIR"] = str(runs_dir)
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=300)
    at.run()
    at.switch_page("pages/compare.py")
    t0 = time.perf_counter()
    at.run()
    base = at.selectbox(key="cmp_base")
    base.set_value(base.options[1]).run()  # the matrix in the folder
    first = time.perf_counter() - t0
    if at.exception:
        raise SystemExit(f"the page failed: {at.exception}")
    times = []
    for _ in range(reruns):
        t0 = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t0)
    return first, times, int(at.dataframe[0].value["n"].sum())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--reruns", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="36 runs, 2 reruns: that it works, numbers meaningless")
    args = ap.parse_args(argv)
    runs, reruns = (36, 2) if args.smoke else (args.runs, args.reruns)
    for layout in ("history", "matrix"):
        with tempfile.TemporaryDirectory(prefix="brnn-compare-page-") as tmp:
            runs_dir = Path(tmp) / "runs"
            make_folder(runs_dir, runs, layout)
            os.environ["BRNN_DATA_DIR"] = str(Path(tmp) / "data")
            first, times, counted = time_page(runs_dir, reruns)
        print(f"Compare page, {runs} runs, {layout} ({counted} in the matrix): first render with the matrix picked "
              f"{first:.2f} s, rerun median {statistics.median(times):.3f} s (min {min(times):.3f}, max "
              f"{max(times):.3f}); load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
