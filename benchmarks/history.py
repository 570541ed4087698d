"""What a long run history costs the dashboard: N valid runs in the folder, each page's server time.

    .venv/bin/python -m benchmarks.history [--runs 100,1000,5000] [--groupings one,tens,none] [--reruns 5]
                                           [--drawings 200] [--json FILE]

One complete finished run is hard-linked under new ids until the folder holds N runs; for each N it times
runs_table, the RunIndex, each page's first render and rerun (AppTest, server time, medians) and a Predict
stroke. `--groupings` then rewrites every run's config.json so that the runs form one N-seed group (`one`),
groups of ten seeds (`tens`) or no group (`none`), and times the Runs page in each: its first render, a rerun
with nothing selected (the first rows overlaid, a group as its band), with the first row selected (a group opens
its runs), after the smoothing changed (the band smoothed again) and with Group seeds off. `--drawings N` saves
drawings first, so every checkpoint has a score (computed once, timed). What each row means and its target:
benchmarks/README.md, "Run history".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from benchmarks.harness.bench_predict import synthetic_canvas
from brnn_core import charts
from brnn_core.checkpoint import save_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.data.canvas import prepare
from brnn_core.data.datasets import default_dataset
from brnn_core.data.drawings import folder_signature, save_drawing
from brnn_core.data.loading import load_dataset
from brnn_core.data.predraw import predraw
from brnn_core.environment import git_commit
from brnn_core.fileio import atomic_write_json, read_json
from brnn_core.inference.predictor import Predictor
from brnn_core.inference.scores import DrawingTensors, score_and_store, stored_accuracy
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.runs.index import RunIndex, runs_table
from brnn_core.runs.rundir import create_run, new_run_config
from brnn_core.training.engine import evaluate
from brnn_core.training.reports import write_report

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
FIRST_RENDERS = 3  # first renders per page (median): a busy 2-core machine moves one by ±0.3 s
PAGES = {"train": "pages/train.py", "runs": "pages/runs.py", "predict": "pages/predict.py"}
TARGETS = {"rerun": 0.2, "runs page first render": 1.0, "predict stroke": 0.1}  # seconds, read at TARGET_RUNS
GROUPED_TARGETS = {"rerun": 0.3, "first render": 3.0}  # the Runs page under --groupings, at TARGET_RUNS
TARGET_RUNS = 1000
GROUPINGS = {"one": "one group of every run", "tens": "groups of ten seeds", "none": "no two runs alike"}


def target_note(n: int, case: str, seconds: float, targets: dict[str, float] = TARGETS) -> str:
    """'target <= X ms ok|MISSED' for the rows with a target at TARGET_RUNS runs, else ''."""
    limit = next((t for k, t in targets.items() if case.endswith(k)), None)
    if n != TARGET_RUNS or limit is None:
        return ""
    return f"  target <= {1000 * limit:g} ms {'ok' if seconds <= limit else 'MISSED'}"


def build_template(root: Path) -> Path:
    """One finished run with every file a real one has; returns its directory."""

    cfg = TrainConfig(dataset="mnist-sample", device="cpu")
    run = create_run(root, new_run_config(cfg, root), run_id="template")
    steps = 540  # fashion-mnist's steps per epoch at batch 100
    for epoch in range(2):
        for k in range(1, steps // 10 + 1):
            step = epoch * steps + 10 * k
            run.log_metric(step=step, epoch=epoch + k * 10 / steps, split="train", loss=2.3 / (1 + step / 300),
                           lr=0.01, samples_per_s=2000.0, elapsed_s=step * 0.05)
        run.log_metric(step=(epoch + 1) * steps, epoch=epoch + 1, split="val", loss=0.5 - 0.1 * epoch,
                       accuracy=0.8 + 0.05 * epoch, lr=0.01, elapsed_s=(epoch + 1) * steps * 0.05)
        run.log_event("epoch", f"epoch {epoch + 1}: ...", step=(epoch + 1) * steps)
    run.log_metric(step=2 * steps, epoch=2, split="test", loss=0.42, accuracy=0.85, elapsed_s=2 * steps * 0.05)
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig())
    ds = load_dataset("mnist-sample", download=False)
    for path in (run.best_ckpt, run.last_ckpt):
        save_checkpoint(path, model, classes=ds.classes, epoch=2, step=2 * steps,
                        metrics={"val_loss": 0.4, "val_acc": 0.85})
    test = evaluate(model, ds.test_x, ds.test_y)
    write_report(run, test, ds.test_y, ds.classes, "mnist-sample", images=ds.test_x)
    run.log_event("finished", "finished: test accuracy 85.00%", step=2 * steps)
    now = time.time()
    run.write_status(state="finished", message="finished: test accuracy 85.00%", step=2 * steps, started=now - 60,
                     ended=now, test_acc=0.85)
    return run.path


def grow(runs_dir: Path, template: Path, n: int) -> None:
    """Hard-linked copies of the template under new run ids until runs_dir holds n runs."""
    have = len([p for p in runs_dir.iterdir() if p.is_dir()])
    for i in range(have, n):
        rid = f"2026{1 + i // 86400 % 12:02d}{1 + i // 3600 % 28:02d}-{i // 60 % 60:02d}{i % 60:02d}00-mnist-sample-" \
              f"{i:04x}"[-40:]
        shutil.copytree(template, runs_dir / rid, copy_function=os.link)
    then = time.time() - 3600  # a history written an hour ago (the index re-reads what changed within a second)
    for path in [p for run in runs_dir.iterdir() for p in (run, *run.rglob("*"))]:
        os.utime(path, (then, then))


def regroup(runs_dir: Path, grouping: str) -> None:
    """Rewrite every run's config.json (its own file, no longer a link to the template's) so that the runs form
    `grouping` (GROUPINGS): seed k for the k-th run, and an lr per group, as a seed group's runs differ."""
    for k, run in enumerate(sorted(p for p in runs_dir.iterdir() if p.is_dir())):
        config = read_json(run / "config.json")
        group = {"one": 0, "tens": k // 10, "none": k}[grouping]
        config["train"] = {**config["train"], "seed": k, "lr": round(0.01 * (1 + group / 10_000), 8)}
        atomic_write_json(run / "config.json", config)
        then = time.time() - 3600  # written an hour ago, as the rest of the history (see grow)
        for path in (run / "config.json", run):
            os.utime(path, (then, then))


def median_time(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) if times else float("nan")


def time_core(runs_dir: Path, reruns: int) -> dict[str, float]:

    out = {"runs_table, uncached": median_time(lambda: runs_table(runs_dir), 1)}
    index = RunIndex(runs_dir)
    out["RunIndex cold"] = median_time(index.table, 1)
    out["RunIndex warm"] = median_time(index.table, reruns)
    out["checkpoints, warm"] = median_time(index.checkpoint_choices, reruns)
    return out


def time_page(app: Path, page: str, reruns: int, stores: tuple[Path, ...] = (),
              firsts: int = FIRST_RENDERS) -> tuple[float, float]:
    """(median first render, median rerun) of one page, server time. A first render has Streamlit's caches
    cleared (a new server process); it is repeated `firsts` times. `stores`: the files a server keeps what it
    read in (the runs' summaries, the drawings' scores), deleted before each first render: the first server
    start after runs were added while no server ran."""
    times = []
    for _ in range(firsts):
        st.cache_resource.clear()
        st.cache_data.clear()
        for path in stores:
            path.unlink(missing_ok=True)
        at = AppTest.from_file(str(app), default_timeout=600)
        at.switch_page(page)
        t0 = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t0)
        if at.exception:
            raise RuntimeError(f"{page}: {[e.value for e in at.exception]}")
    return statistics.median(times), median_time(at.run, reruns)


def wall_and_cpu(fn, n: int) -> tuple[float, float]:
    """Medians of n calls: wall-clock seconds and this process's CPU seconds (every thread: AppTest runs the
    script in one). On a shared machine the CPU time moves less with the load than the wall-clock time."""
    walls, cpus = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def runs_page_reruns(app: Path, reruns: int, stores: tuple[Path, ...]) -> dict[str, tuple[float, float]]:
    """The Runs page in one grouping, (wall, cpu) medians: first render (no index store: the first server after
    the runs changed), then reruns of one session: as it opened, with the first row selected, after a smoothing
    change (a band is smoothed again), with Group seeds off (when there is a group to fold)."""

    def first() -> AppTest:
        st.cache_resource.clear()
        st.cache_data.clear()
        for path in stores:
            path.unlink(missing_ok=True)
        at = AppTest.from_file(str(app), default_timeout=600)
        at.switch_page("pages/runs.py").run()
        return at

    out = {"first render": wall_and_cpu(first, FIRST_RENDERS)}
    at = first()
    out["rerun"] = wall_and_cpu(at.run, reruns)
    switch = at.toggle(key="runs_group_seeds")
    folded = switch.value and not switch.disabled
    at.session_state["runs_groups_table" if folded else "runs_table"] = {"selection": {"rows": [0], "columns": []}}
    at.run()
    out["rerun, first row selected"] = wall_and_cpu(at.run, reruns)
    smoothings = iter([0.5, 0.6] * reruns)
    out["rerun, smoothing changed"] = wall_and_cpu(
        lambda: at.slider(key="cmp_smooth").set_value(next(smoothings)).run(), reruns)
    if folded:
        at.toggle(key="runs_group_seeds").set_value(False).run()
        out["rerun, seeds not grouped"] = wall_and_cpu(at.run, reruns)
    if at.exception:
        raise RuntimeError(f"runs page: {[e.value for e in at.exception]}")
    return out


def time_stroke(runs_dir: Path) -> float:
    """The Predict page's per-stroke work (its fragment's body) on the default model."""

    predictor = Predictor.from_checkpoint(next(runs_dir.iterdir()) / "checkpoints" / "best.pt")
    canvas = synthetic_canvas()

    def stroke() -> None:
        x = prepare(canvas)
        probs = predictor.predict(x.numpy())
        charts.probabilities_figure(probs, predictor.classes).to_json()

    stroke()
    return median_time(stroke, 50)


def save_drawings(data_dir: Path, n: int) -> None:
    """n canvas drawings (a synthetic stroke digit, labels 0-9 in turn) as the user's saved drawings."""

    canvas = synthetic_canvas()
    for k in range(n):
        save_drawing(data_dir, canvas, k % 10, [str(d) for d in range(10)], now=1.7e9 + k)


def score_all(runs_dir: Path, data_dir: Path) -> float:
    """What the dashboard's background Scorer does once after drawings are saved: every checkpoint's score on
    them, stored beside it (the drawings read once). Timed here so that the pages below are timed in the steady
    state, not while 1,000 scores are being computed beside them."""

    signature, tensors = folder_signature(data_dir), DrawingTensors(data_dir)
    t0 = time.perf_counter()
    for path in sorted(runs_dir.glob("*/checkpoints/*.pt")):
        if not stored_accuracy(path, signature)[0]:
            score_and_store(path, data_dir, signature, tensors)
    return time.perf_counter() - t0


def every_page(runs_dir: Path, data_dir: Path, args) -> dict[str, float]:
    """The core reads, each page's first render and rerun, a Predict stroke: seconds."""
    row = time_core(runs_dir, args.reruns)
    if args.drawings:
        row["scoring every checkpoint once"] = score_all(runs_dir, data_dir)
    for name, page in PAGES.items():
        row[f"{name} page first render, no index store"], _ = time_page(
            REPO / "streamlit_app.py", page, 0, stores=(runs_dir / ".index.json", data_dir / ".drawing-scores.json"))
        row[f"{name} page first render"], row[f"{name} page rerun"] = time_page(
            REPO / "streamlit_app.py", page, args.reruns)
    row["predict stroke"] = time_stroke(runs_dir)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="100,1000,5000", help="comma-separated run counts, increasing")
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--groupings", default="",
                        help=f"comma-separated, of {', '.join(GROUPINGS)}: the Runs page with the runs grouped so")
    parser.add_argument("--groupings-only", action="store_true",
                        help="time only the Runs page under --groupings (not every page with the runs as built)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--drawings", type=int, default=0,
                        help="save this many drawings first: every checkpoint then has a 'my drawings' score, "
                             "computed once in the background and kept beside it; the pages only read it")
    args = parser.parse_args(argv)
    sizes = sorted(int(n) for n in args.runs.split(",") if n)
    groupings = [g for g in args.groupings.split(",") if g]
    if set(groupings) - set(GROUPINGS):
        parser.error(f"--groupings: use {', '.join(GROUPINGS)}")
    os.chdir(REPO)  # the pages' `ui` package and relative paths
    root = Path(tempfile.mkdtemp(prefix="brnn-history-"))
    runs_dir, data_dir = root / "runs", root / "data"
    runs_dir.mkdir()
    data_dir.mkdir()
    os.environ.update(BRNN_RUNS_DIR=str(runs_dir), BRNN_DATA_DIR=str(data_dir))
    results: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": git_commit(short=True),
                     "cpus": os.cpu_count(), "sizes": {}}
    try:
        save_drawings(data_dir, args.drawings)
        # what a server starts in the background once per data folder (ui/warmup.py), made here first: else each
        # first render below, a new server's, starts it again and the pages are timed beside its processes
        predraw(default_dataset(data_dir), data_dir, TrainConfig().drawn_share)
        template = build_template(root / "template-parent")
        grow(runs_dir, template, 3)
        for page in PAGES.values():  # import every module once: first renders below exclude imports
            time_page(REPO / "streamlit_app.py", page, 0, firsts=1)
        for n in sizes:
            grow(runs_dir, template, n)
            load0 = os.getloadavg()[0]
            row = {} if args.groupings_only else every_page(runs_dir, data_dir, args)
            row["load_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
            results["sizes"][n] = row
            print(f"\n{n} runs (load {row['load_1min'][0]} -> {row['load_1min'][1]})", flush=True)
            for key, value in row.items():
                if key != "load_1min":
                    print(f"  {key:28} {value * 1000:10.1f} ms{target_note(n, key, value)}", flush=True)
            for grouping in groupings:
                regroup(runs_dir, grouping)
                load0 = os.getloadavg()[0]
                timed = runs_page_reruns(REPO / "streamlit_app.py", args.reruns,
                                         (runs_dir / ".index.json", data_dir / ".drawing-scores.json"))
                row[f"runs page, {grouping}"] = {**timed, "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}
                print(f"\n{n} runs, {GROUPINGS[grouping]}: the Runs page (load {round(load0, 2)} -> "
                      f"{round(os.getloadavg()[0], 2)})", flush=True)
                for key, (wall, cpu) in timed.items():
                    print(f"  {key:28} {wall * 1000:10.1f} ms (cpu {cpu * 1000:7.1f} ms)"
                          f"{target_note(n, key, wall, GROUPED_TARGETS)}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = args.json or RESULTS / f"{time.strftime('%Y-%m-%d_%H%M%S')}_history.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
