"""The *scaling* rows: throughput against batch size, hidden size, threads and eval batch; a step's parts."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from benchmarks.harness.context import Context, sync, timed
from benchmarks.harness.rows import Row, median, throughput_row
from benchmarks.harness.sides import EngineTrainer
from brnn_core.config import TrainConfig
from brnn_core.data.batching import to_input
from brnn_core.model import ModelConfig, RecurrentClassifier, mode
from brnn_core.training.engine import evaluate


def timed_steps(trainer: EngineTrainer, min_seconds: float, min_steps: int = 2) -> tuple[float, float]:
    """Train until at least `min_seconds` and `min_steps` have passed: (samples/s, ms per step)."""
    samples = steps = 0
    seconds = 0.0
    while seconds < min_seconds or steps < min_steps:
        n, dt = trainer.run(1)
        samples, steps, seconds = samples + n, steps + 1, seconds + dt
    return samples / seconds, 1000 * seconds / steps


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    previous = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def bench_scaling(ctx: Context) -> list[Row]:
    """Short measurements of many configurations, swept round-robin `scaling_sweeps` times."""
    return train_scaling(ctx) + eval_scaling(ctx) + step_breakdown(ctx)


def scaling_points(ctx: Context) -> dict[str, tuple[EngineTrainer, int | None, str]]:
    """case -> (trainer, threads or None, note): batch sizes, hidden sizes and, on CPU, thread counts."""
    s = ctx.sizes
    x, y = ctx.train_data()
    cfg = TrainConfig()
    points: dict[str, tuple[EngineTrainer, int | None, str]] = {}
    for bs in s.scaling_batches:
        points[f"train, batch {bs}"] = (EngineTrainer(x, y, ctx.device, batch_size=bs), None,
                                        f"hidden {cfg.hidden_size}")
    for hidden in s.scaling_hidden:
        points[f"train, hidden {hidden}"] = (EngineTrainer(x, y, ctx.device, hidden_size=hidden), None,
                                             f"batch {cfg.batch_size}")
    if ctx.device.type == "cpu":
        default_threads = torch.get_num_threads()
        for n in sorted({1, default_threads, *(n for n in (2, 4, 8) if n <= default_threads)}):
            points[f"train, {n} thread{'s' if n > 1 else ''}"] = (
                EngineTrainer(x, y, ctx.device), n,
                f"torch.set_num_threads({n}){' (this run)' if n == default_threads else ''}")
    return points


def train_scaling(ctx: Context) -> list[Row]:
    """Training throughput against batch size, hidden size and threads."""
    s = ctx.sizes
    points = scaling_points(ctx)
    for trainer, threads, _ in points.values():
        with num_threads(threads):
            trainer.run(1)  # warm-up (first call for this shape)
    results: dict[str, list[tuple[float, float]]] = {case: [] for case in points}
    for sweep in range(s.scaling_sweeps):
        for case, (trainer, threads, _) in points.items():
            with num_threads(threads):
                results[case].append(timed_steps(trainer, s.scaling_seconds))
            ctx.log(f"scaling {case}: {results[case][-1][0]:,.0f} samples/s (sweep {sweep + 1}/{s.scaling_sweeps})")
    rows = []
    for case, (_, _, note) in points.items():
        ms = median([r[1] for r in results[case]])
        rows.append(throughput_row("scaling", case, [r[0] for r in results[case]], f"{ms:.1f} ms/step; {note}"))
    return rows


def eval_scaling(ctx: Context) -> list[Row]:
    """Evaluation throughput against the eval batch size, also swept round-robin."""
    s = ctx.sizes
    _, ex, ey = ctx.eval_data()
    ex, ey = ex[:s.scaling_eval_images].to(ctx.device), ey[:s.scaling_eval_images].to(ctx.device)
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig()).to(ctx.device)
    eval_sps: dict[int, list[float]] = {bs: [] for bs in s.scaling_eval_batches}
    for bs in s.scaling_eval_batches:
        evaluate(model, ex[:bs], ey[:bs], batch_size=bs)  # warm-up
    for _ in range(s.scaling_sweeps):
        for bs in s.scaling_eval_batches:
            _, seconds = timed(ctx.device, lambda bs=bs: evaluate(model, ex, ey, batch_size=bs))
            eval_sps[bs].append(len(ex) / seconds)
            ctx.log(f"scaling eval batch {bs}: {eval_sps[bs][-1]:,.0f} samples/s")
    default_bs = TrainConfig().eval_batch_size
    return [throughput_row("scaling", f"evaluate, eval batch {bs}", sps,
                           f"{len(ex)} images{' (the default)' if bs == default_bs else ''}")
            for bs, sps in eval_sps.items()]


def step_breakdown(ctx: Context) -> list[Row]:
    """Share of a default training step spent in data, forward, backward and the optimizer."""
    x, y = ctx.train_data()
    trainer = EngineTrainer(x, y, ctx.device)
    trainer.run(2)
    model, opt = trainer.model, trainer.optimizer
    xd, yd = trainer.x, trainer.y
    parts = {"data (index + to float)": 0.0, "forward + loss": 0.0, "backward": 0.0, "optimizer step": 0.0}
    names = list(parts)
    marks: list[float] = []

    def mark() -> None:
        sync(ctx.device)
        marks.append(time.perf_counter())

    with mode(model, training=True):
        for idx in trainer._index_batches(ctx.sizes.breakdown_steps):
            marks.clear()
            mark()
            xb, yb = to_input(xd[idx]), yd[idx]
            mark()
            loss = F.cross_entropy(model(xb), yb)
            mark()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            mark()
            opt.step()
            mark()
            for i, name in enumerate(names):
                parts[name] += marks[i + 1] - marks[i]
    total = sum(parts.values())
    per_step = 1000 * total / ctx.sizes.breakdown_steps
    note = f"{ctx.sizes.breakdown_steps} default steps, synchronised between parts; {per_step:.1f} ms/step"
    return [Row("scaling", f"step time: {name}", "share", 100 * t / total, "%", note=note)
            for name, t in parts.items()]


