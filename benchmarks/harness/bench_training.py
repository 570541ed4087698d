"""The *train* and *amp* rows: training samples/s of the engine vs the blog loop, and under autocast."""

from __future__ import annotations

from benchmarks.harness.child import children
from benchmarks.harness.context import Context
from benchmarks.harness.rows import Row, alternate, ratio_row, stat_row, throughput_row
from benchmarks.harness.sides import EngineTrainer
from brnn_core.config import TrainConfig


def bench_train(ctx: Context) -> list[Row]:
    s = ctx.sizes
    dev, tuned = ctx.device, ctx.tuned
    specs = {"brnn_core engine": ("engine", dev, tuned, {}),
             "blog loop": ("blog", dev, False, {})}
    if s.train_variants:  # --quick leaves them out: their rows are not the smoke run's
        specs["engine, host sync every step"] = ("engine", dev, tuned, {"log_interval": 1})
        if tuned:
            specs["engine, default allocator"] = ("engine", dev, False, {})
    with children(specs) as sides:
        for side in sides.values():
            side.call("train", steps=s.warmup_steps)
        res = alternate({name: (lambda side=side: side.samples_per_s(s.train_steps)) for name, side in sides.items()},
                        s.reps, ctx.log, "train ")
        faults = {name: side.faults for name, side in sides.items()}
    batch = TrainConfig().batch_size
    note = f"{s.train_steps} steps of batch {batch} on mnist-sample, after {s.warmup_steps} warm-up"
    rows = [
        throughput_row("train", "brnn_core engine", res["brnn_core engine"],
                       note + "; uint8 data on the device, loss read every 10 steps"
                       + ("; glibc allocator tuned as the worker does" if tuned else "")),
        throughput_row("train", "blog loop", res["blog loop"],
                       "PIL + ToTensor + DataLoader, loss.item() every step; a plain Python process"),
        ratio_row("train", "engine / blog", res["brnn_core engine"], res["blog loop"], target=1.1,
                  note="same data, hyperparameters and device; alternated"),
    ]
    variants = {  # side: (its note, the ratio's name, what the ratio shows)
        "engine, host sync every step": (
            "log_interval=1: loss read back after every step", "engine / engine with sync every step",
            "what avoiding the per-step sync gains"),
        "engine, default allocator": (
            "the same engine with glibc's default malloc settings", "engine / engine with default allocator",
            "what brnn_core.training.allocator gains"),
    }
    for name, (side_note, ratio, gain) in variants.items():
        if name in res:  # measured: not under --quick, the allocator only when the engine's is tuned
            rows += [throughput_row("train", name, res[name], side_note),
                     ratio_row("train", ratio, res["brnn_core engine"], res[name], note=gain)]
    if any(any(v) for v in faults.values()):  # where the allocator gain comes from (and why it varies)
        for name in ("brnn_core engine", "engine, default allocator", "blog loop"):
            if name in faults:
                rows.append(stat_row("train", f"page faults: {name}", "page faults", faults[name], "per step",
                                     "minor faults (fresh zeroed pages) per training step"))
    return rows


def bench_amp(ctx: Context) -> list[Row]:
    s = ctx.sizes
    x, y = ctx.train_data()
    modes = ctx.amp_modes()
    if len(modes) < 2:
        return [Row("amp", "skipped", "note", float("nan"), "", note=f"no mixed precision on {ctx.device.type}")]
    trainers = {m: EngineTrainer(x, y, ctx.device, amp=m) for m in modes}
    for t in trainers.values():
        t.run(s.warmup_steps)
    res = alternate({f"amp {m}": (lambda t=t: t.samples_per_s(s.train_steps)) for m, t in trainers.items()},
                    s.reps, ctx.log, "amp ")
    rows = [throughput_row("amp", f"engine, amp {m}", res[f"amp {m}"], f"{s.train_steps} steps of batch 100")
            for m in modes]
    rows += [ratio_row("amp", f"amp {m} / amp off", res[f"amp {m}"], res["amp off"], note="above 1 means faster")
             for m in modes[1:]]
    return rows


