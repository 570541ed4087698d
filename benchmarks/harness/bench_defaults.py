"""The *defaults* row: what a user gets without touching a setting.

*defaults*: `python -m brnn_core train --set dataset=D --set epochs=1` as a user types it (no thread settings)
against the blog loop training the same epoch in a plain Python process, alternated; the same CLI run with
`--set amp=off` beside them shows what the default mixed precision (auto: bf16 where native) buys
(docs/decisions/022-amp-auto-default.md: the defaults' target is 1.5x the blog loop).
A CLI run is timed from its metrics.csv (first logged step to the epoch's last), so start-up, data loading,
validation and the test report are left out, as they are for the blog loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.harness.bench_worker import worker_window
from benchmarks.harness.child import CHECKOUT, start_side
from benchmarks.harness.context import Context
from benchmarks.harness.rows import Row, alternate, ratio_row, throughput_row
from brnn_core.config import TrainConfig
from brnn_core.data.datasets import DatasetError
from brnn_core.runs.rundir import Run, list_runs


def dataset_for(ctx: Context) -> tuple[str, int]:
    """(dataset, its training-set size): fashion-mnist when on disk (mnist-sample with --quick or without it)."""
    if not ctx.sizes.quick_data:
        try:
            return "fashion-mnist", len(ctx.dataset("fashion-mnist").train_y)
        except DatasetError as exc:
            ctx.log(f"fashion-mnist not available ({str(exc)[:80]}...): using mnist-sample")
    return "mnist-sample", len(ctx.dataset("mnist-sample").train_y)


def default_env() -> dict[str, str]:
    """This environment as a user's shell would have it: without thread settings a bench option may have added."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return {**env, "BRNN_PROGRESS": "plain", "PYTHONUNBUFFERED": "1"}


def start_cli(runs_dir: Path, dataset: str, sets: tuple[str, ...] = ()) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs_dir), "--set", f"dataset={dataset}",
           "--set", "epochs=1", "--set", "seed=0", "--set", "device=cpu", *(a for s in sets for a in ("--set", s))]
    return subprocess.Popen(cmd, cwd=CHECKOUT, env=default_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def cli_throughput(run: Run, n_images: int) -> float:
    """Images per second between the run's first logged step and the last one of its epoch (metrics.csv)."""
    cfg = TrainConfig.from_dict(run.config()["train"])
    first, last, samples = worker_window(cfg, n_images)
    train = run.metrics().query("split == 'train'").set_index("step")
    return samples / float(train.loc[last, "elapsed_s"] - train.loc[first, "elapsed_s"])


def cli_run(runs_dir: Path, dataset: str, n_images: int, trained_in: list[str], sets: tuple[str, ...] = ()) -> float:
    """One CLI run's throughput; the precision it trained in (config.json's amp) is appended to `trained_in`."""
    before = {r.id for r in list_runs(runs_dir)}
    proc = start_cli(runs_dir, dataset, sets)
    err = proc.communicate(timeout=3600)[1]
    if proc.returncode:
        raise RuntimeError(f"a CLI training run failed: {err[-600:]}")
    (run,) = [r for r in list_runs(runs_dir) if r.id not in before]
    trained_in.append(str(run.config().get("amp")))
    return cli_throughput(run, n_images)


def bench_defaults(ctx: Context) -> list[Row]:
    dataset, n_images = dataset_for(ctx)
    runs_dir = ctx.workdir / "defaults-runs"
    cfg = TrainConfig()
    steps = -(-(n_images - round(n_images * cfg.val_fraction)) // cfg.batch_size)  # an epoch, as the CLI trains
    hidden = ctx.sizes.default_hidden
    sets = (f"hidden_size={hidden}",) if hidden else ()
    local = "defaults" in ctx.sizes.local_sides
    blog = start_side("blog", ctx.device, tuned=False, spec={"dataset": dataset, "hidden_size": hidden}, local=local)
    auto, off = [], []
    try:
        blog.call("train", steps=5)  # warm-up
        res = alternate({"cli": lambda: cli_run(runs_dir, dataset, n_images, auto, sets),
                         "blog": lambda: blog.samples_per_s(steps),
                         "cli amp=off": lambda: cli_run(runs_dir, dataset, n_images, off, (*sets, "amp=off"))},
                        ctx.sizes.default_reps, ctx.log, "defaults ")
    finally:
        blog.close()
    what = f"1 epoch of {dataset} ({steps} steps of 100{f', hidden {hidden}' if hidden else ''})"
    cli = f"python -m brnn_core train, {what}; no thread settings ({os.cpu_count()} cores)"
    return [throughput_row("defaults", "CLI, default settings", res["cli"],
                           f"{cli}; amp={cfg.amp}, trained in {'/'.join(sorted(set(auto)))}"),
            throughput_row("defaults", "CLI, amp=off", res["cli amp=off"], f"{cli}; fp32, the blog's precision"),
            throughput_row("defaults", "blog loop, plain process", res["blog"],
                           f"{what}; torch's own threads" + ("; in the suite's process (--quick)" if local else "")),
            ratio_row("defaults", "CLI defaults / blog loop", res["cli"], res["blog"], target=1.5,
                      note="alternated, back to back (docs/decisions/022-amp-auto-default.md)"),
            ratio_row("defaults", "CLI amp=off / blog loop", res["cli amp=off"], res["blog"],
                      note="alternated, back to back")]
