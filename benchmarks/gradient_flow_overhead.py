"""What recording the gradient flow through time costs training, per cell, at the default model and batch size.

    .venv/bin/python -m benchmarks.gradient_flow_overhead [--every 50] [--rounds 5] [--threads 1] [--cells lstm,gru]

A block is `--every` training steps of the engine (`train_one_epoch`, real mnist-sample digits, batch 100, hidden
128, 2 layers, two-way, Adam, fp32, no augmentation: the cheapest step, so the largest share for the probe) either
with the probe (one measurement, at the block's first step, appended to a real gradient_flow.csv) or without.
Blocks alternate with / without, the order flipped every round (ABBA), so a change of load hits both alike. Two
estimates per cell: the blocks' (the median of the rounds' with / without time ratios, minus 1, and their range),
and the parts' (the median measurement over `--every` times the median step, every step and measurement of every
block timed on its own: on a shared machine far steadier than whole blocks, which a burst of load swings by tens of
%). Target: <= 5 % at the default interval (docs/decisions/020-gradient-flow-every.md). `--smoke`: a few tiny steps
(numbers meaningless).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness.machine import machine_info
from brnn_core.config import GRADIENT_FLOW_EVERY
from brnn_core.data.loading import load_dataset
from brnn_core.model import CELLS, ModelConfig, RecurrentClassifier, network_name
from brnn_core.training.engine import make_optimizer, train_one_epoch
from brnn_core.training.gradient_flow import gradient_flow_probe

CANDIDATES = (10, 25, 50, 100, 200)


class Timer:
    """Every step's and every measurement's seconds in a block, from the engine's own hooks."""

    def __init__(self, probe, device: torch.device):
        self.probe, self.marks, self.measurements = probe, [], []
        # a GPU runs the steps asynchronously: wait for them before reading the clock
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def before_step(self, step: int) -> bool:
        self.sync()
        self.marks.append(time.perf_counter())
        return True

    def measure(self, step: int, batch: int) -> None:
        if self.probe is not None and step % self.probe.every == 0:
            t = time.perf_counter()
            self.probe(step, 0, batch)
            self.sync()
            self.measurements.append(time.perf_counter() - t)

    def steps(self) -> list[float]:
        """Each step's seconds, without the measurement that ran in its interval."""
        spans = [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]
        if self.measurements:
            spans[0] -= self.measurements[0]  # the probe fires at the block's first step
        return spans


def block(model, optimizer, images, labels, start: int, steps: int, batch: int, probe) -> tuple[float, Timer]:
    """Seconds for `steps` training steps from step `start` (a multiple of the interval: the probe fires once)."""
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(start)).to(images.device)
    batches = [order[(k * batch) % (len(images) - batch):][:batch] for k in range(steps)]
    timer = Timer(probe, images.device)
    t = time.perf_counter()
    train_one_epoch(model, optimizer, images, labels, batches, step=start, log_interval=steps,
                    before_step=timer.before_step, probe=timer.measure)
    timer.sync()
    timer.marks.append(time.perf_counter())
    return timer.marks[-1] - t, timer


def measure_cell(cell: str, args, images, labels, folder: Path) -> dict:
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig(cell=cell, hidden_size=args.hidden, num_layers=2, head="bidir",
                                            input_scale="standard")).to(images.device)
    optimizer = make_optimizer(model.parameters(), "adam", 0.01)
    probe = gradient_flow_probe(folder / f"{cell}.csv", model, images, labels, every=args.every,
                                batch_size=args.batch, seed=0, steps_per_epoch=len(images) // args.batch)
    block(model, optimizer, images, labels, 0, 3, args.batch, probe)  # warm-up: first-call allocations
    sides, steps, measurements = {"with": [], "without": []}, [], []
    start = args.every
    for r in range(args.rounds):
        for side in (("without", "with") if r % 2 == 0 else ("with", "without")):
            seconds, timer = block(model, optimizer, images, labels, start, args.every, args.batch,
                                   probe if side == "with" else None)
            sides[side].append(seconds)
            steps += timer.steps()
            measurements += timer.measurements
            start += args.every
    ratios = [w / wo for w, wo in zip(sides["with"], sides["without"], strict=True)]
    step, measurement = statistics.median(steps), statistics.median(measurements)
    return {"cell": cell, "network": network_name(model.cfg), "step_ms": 1000 * step,
            "measurement_ms": 1000 * measurement, "blocks": statistics.median(ratios) - 1,
            "blocks_range": [min(ratios) - 1, max(ratios) - 1], "rounds": args.rounds,
            "parts": measurement / (args.every * step),
            "block_s": {k: [round(v, 3) for v in vs] for k, vs in sides.items()},
            "predicted": {k: measurement / (k * step) for k in CANDIDATES}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gradient_flow_overhead",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=GRADIENT_FLOW_EVERY, help="steps per measurement (a block)")
    parser.add_argument("--rounds", type=int, default=5, help="pairs of blocks per cell")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (the GPU check's machine)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--smoke", action="store_true", help="a few tiny steps: checks the script, not the numbers")
    args = parser.parse_args(argv)
    if args.smoke:
        args.every, args.rounds, args.hidden = 4, 1, 8
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    meta = machine_info(device)
    data = load_dataset("mnist-sample")
    images, labels = data.train_x.to(device), data.train_y.to(device)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for cell in args.cells.split(","):
            res = measure_cell(cell, args, images, labels, Path(folder))
            results.append(res)
            low, high = res["blocks_range"]
            predicted = ", ".join(f"K={k} {100 * v:.1f} %" for k, v in res["predicted"].items())
            print(f"{res['network']}: step {res['step_ms']:.0f} ms, one measurement {res['measurement_ms']:.0f} ms "
                  f"({res['measurement_ms'] / res['step_ms']:.2f} steps); overhead at every {args.every} steps: "
                  f"parts {100 * res['parts']:.1f} %, blocks {100 * res['blocks']:.1f} % (rounds {100 * low:.1f} "
                  f"to {100 * high:.1f} %); the parts at other intervals: {predicted}", flush=True)
    print(f"{meta['device_name']}, threads {args.threads}, hidden {args.hidden}, batch {args.batch}, "
          f"{args.rounds} rounds, load {meta.get('load_avg_start')}, commit {meta.get('git_commit')}")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "every": args.every, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
