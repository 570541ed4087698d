"""The *worker* and *memory* rows: the dashboard's path (jobs.start_worker) against the bare engine.

A worker run is a real one: a subprocess writing a run directory and polling for controls. Its
throughput is read from its own metrics.csv between two logged steps; its peak RSS from wait4.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from pathlib import Path

import psutil
import torch

from benchmarks.harness.child import Child
from benchmarks.harness.context import Context
from benchmarks.harness.rows import Row, alternate, median, stat_row, throughput_row
from benchmarks.harness.sides import EngineTrainer
from brnn_core.config import TrainConfig
from brnn_core.runs.jobs import start_worker
from brnn_core.text import plural
from brnn_core.training.engine import evaluate
from brnn_core.training.threads import cpu_threads


def worker_config(ctx: Context) -> TrainConfig:
    """The default TrainConfig, one epoch of mnist-sample on the bench device (quick: a shorter epoch)."""
    overrides = {"dataset": "mnist-sample", "epochs": 1, "device": str(ctx.device), **ctx.sizes.worker_overrides}
    return TrainConfig().replace(**overrides).validate()


def worker_window(cfg: TrainConfig, n_images: int) -> tuple[int, int, int]:
    """(first, last, samples): the logged steps the worker is timed between, and the images trained in between.

    The first log interval is warm-up; timing runs from the first logged step to the last one of the epoch.
    """
    n_train = n_images - max(1, int(round(n_images * cfg.val_fraction)))  # as data.batching.split_train_val
    steps_per_epoch = math.ceil(n_train / cfg.batch_size)
    first = cfg.log_interval
    last = steps_per_epoch // cfg.log_interval * cfg.log_interval
    if last <= first:
        raise RuntimeError(f"a {steps_per_epoch}-step epoch logs fewer than two points at log_interval "
                           f"{cfg.log_interval}")
    return first, last, min(last * cfg.batch_size, n_train) - first * cfg.batch_size


def wait_and_measure(proc, run) -> float:
    """Wait for the worker process to end (15 minutes at most); its peak RSS in MB."""
    peak_sampled, rusage = 0, None
    deadline = time.monotonic() + 900
    try:
        watched = psutil.Process(proc.pid)
    except Exception:  # noqa: BLE001 - sampling is only a fallback
        watched = None
    while True:
        if hasattr(os, "wait4"):  # reaps the worker and returns its own resource usage
            pid, wait_status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(wait_status)
                break
        elif proc.poll() is not None:
            break
        if watched is not None:
            with contextlib.suppress(Exception):
                peak_sampled = max(peak_sampled, watched.memory_info().rss)
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"worker run {run.path} took over 15 minutes; killed")
        time.sleep(0.05)
    if rusage is not None:  # ru_maxrss: kilobytes on Linux, bytes on macOS
        return rusage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    return peak_sampled / 2**20


def run_worker_once(ctx: Context, runs_dir: Path) -> dict:
    """One training run through jobs.start_worker; timings from its metrics.csv, peak RSS from wait4."""
    cfg = worker_config(ctx)
    first, last, samples = worker_window(cfg, len(ctx.train_data()[0]))
    t0 = time.time()
    run, proc = start_worker(runs_dir, cfg)
    peak_mb = wait_and_measure(proc, run)
    wall = time.time() - t0
    final = run.status()
    if final.get("state") != "finished":
        log_tail = (run.path / "worker.log").read_text(errors="replace")[-800:]
        raise RuntimeError(f"worker ended {final.get('state')}: {final.get('message')}\n{log_tail}")
    metrics = run.metrics()
    train = metrics[metrics["split"] == "train"].set_index("step")
    if first not in train.index or last not in train.index:
        raise RuntimeError(f"worker run {run.path} did not log steps {first} and {last}")
    seconds = float(train.loc[last, "elapsed_s"] - train.loc[first, "elapsed_s"])
    reported = [float(v) for step, v in train["samples_per_s"].items() if first < step <= last]
    return {"samples_per_s": samples / seconds, "reported": median(reported), "wall_s": wall,
            "startup_s": wall - float(final.get("elapsed_s") or 0.0), "peak_mb": peak_mb}


def bench_worker(ctx: Context) -> list[Row]:
    s = ctx.sizes
    x, y = ctx.train_data()
    runs_dir = ctx.workdir / "worker-runs"
    cfg = worker_config(ctx)
    first, last, _ = worker_window(cfg, len(x))
    steps = last - first
    # The bare engine gets the worker's thread count on an idle machine (threads.py: every core by default,
    # unless cpu_threads or OMP_NUM_THREADS is set), so that the comparison measures the worker's machinery only.
    threads = (cpu_threads(cfg.cpu_threads) if ctx.device.type == "cpu" else None) or torch.get_num_threads()
    spec = {"hidden_size": cfg.hidden_size, "batch_size": cfg.batch_size, "log_interval": cfg.log_interval,
            "threads": threads}
    worker_runs: list[dict] = []

    def worker_case() -> float:
        info = run_worker_once(ctx, runs_dir)
        worker_runs.append(info)
        ctx.worker_peaks_mb.append(info["peak_mb"])
        return info["samples_per_s"]

    engine = Child("engine", ctx.device, tuned=ctx.tuned, spec=spec)
    try:
        if s.worker_warmup:  # an untimed run: the first process start reads torch from a cold disk cache
            ctx.worker_peaks_mb.append(run_worker_once(ctx, runs_dir)["peak_mb"])
        engine.call("train", steps=first)  # the worker's timed window also starts after `first` steps
        res = alternate({"bare engine": lambda: engine.samples_per_s(steps), "worker": worker_case},
                        s.worker_reps, ctx.log, "worker ")
    finally:
        engine.close()
    eng, wrk = res["bare engine"], res["worker"]
    overhead = [100 * (e / w - 1) for e, w in zip(eng, wrk, strict=False)]
    value = 100 * (median(eng) / median(wrk) - 1)
    window = f"steps {first}->{last} of a 1-epoch mnist-sample run"
    startup = [r["startup_s"] for r in worker_runs]
    wall = [r["wall_s"] for r in worker_runs]
    return [
        throughput_row("worker", "bare engine", eng,
                       f"{steps} steps, hidden {cfg.hidden_size}, batch {cfg.batch_size}, "
                       f"log every {cfg.log_interval}, {plural(threads, 'thread')}; a fresh process set up like the "
                       "worker"),
        throughput_row("worker", "worker (wall time)", wrk, f"{window}, from metrics.csv elapsed_s"),
        throughput_row("worker", "worker (reported samples_per_s)", [r["reported"] for r in worker_runs],
                       "median of metrics.csv samples_per_s (what the dashboard shows)"),
        Row("worker", "worker overhead vs bare engine", "overhead", value, "%", min(overhead), max(overhead),
            len(overhead), "< 10", "yes" if value < 10 else "no",
            "extra wall time per sample: control polling, status/metrics writes, heartbeats"),
        stat_row("worker", "worker start-up", "time", startup, "s",
                 "spawn -> training starts: interpreter, torch import, dataset load, model build"),
        stat_row("worker", "worker run, 1 epoch", "time", wall, "s",
                 "spawn -> exit, including validation, the test report and checkpoints"),
    ]


def bench_memory(ctx: Context) -> list[Row]:
    if not ctx.worker_peaks_mb:
        ctx.worker_peaks_mb.append(run_worker_once(ctx, ctx.workdir / "worker-runs")["peak_mb"])
    peaks = ctx.worker_peaks_mb
    rows = [stat_row("memory", "worker peak RSS", "memory", peaks, "MB",
                     "1-epoch mnist-sample worker run, ru_maxrss from wait4 (whole process: Python, torch, data)")]
    if ctx.device.type == "cuda":
        x, y = ctx.train_data()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(ctx.device)
        trainer = EngineTrainer(x, y, ctx.device)
        trainer.run(max(2, ctx.sizes.train_steps // 4))
        train_peak = torch.cuda.max_memory_allocated(ctx.device) / 2**20
        torch.cuda.reset_peak_memory_stats(ctx.device)
        _, ex, ey = ctx.eval_data()
        evaluate(trainer.model, ex.to(ctx.device), ey.to(ctx.device), batch_size=TrainConfig().eval_batch_size)
        eval_peak = torch.cuda.max_memory_allocated(ctx.device) / 2**20
        rows += [Row("memory", "CUDA max allocated, training", "memory", train_peak, "MB",
                     note="default config, mnist-sample on the device (torch.cuda.max_memory_allocated)"),
                 Row("memory", "CUDA max allocated, evaluation", "memory", eval_peak, "MB",
                     note="test set on the device, default eval batch")]
    return rows


