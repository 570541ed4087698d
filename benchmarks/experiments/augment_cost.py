"""What training-batch augmentation costs: training samples/s with and without it, alternated.

    python -m benchmarks.experiments.augment_cost --dataset mnist-sample --levels light,medium,strong --reps 12
    python -m benchmarks.experiments.augment_cost --smoke     # two rounds of two steps: the code path only

The default model trains through `engine.train_one_epoch` with no augmentation and per level, in rotating
rounds; also the augmentation alone (ms per batch) as a share of a plain step, steadier on a busy machine.
Decision: docs/decisions/001-augmentation.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from brnn_core.config import TrainConfig
from brnn_core.data.augment import LEVELS, Augmenter, augment_batch, step_generator
from brnn_core.data.batching import batches, epoch_order, to_input
from brnn_core.data.loading import load_dataset
from brnn_core.devices import resolve_device
from brnn_core.model import RecurrentClassifier
from brnn_core.training.engine import make_optimizer, train_one_epoch
from brnn_core.training.splits import model_config_for

ROOT = Path(__file__).resolve().parents[2]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Side:
    """One model + optimizer trained with one augmentation level; measure() returns samples/s."""

    def __init__(self, level: str, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig, dataset: str):
        torch.manual_seed(cfg.seed)
        self.model = RecurrentClassifier(model_config_for(cfg, 10)).to(x.device)
        self.opt = make_optimizer(self.model.parameters(), cfg.optimizer, cfg.lr)
        self.augment = None if level == "off" else Augmenter(lambda: level, dataset=dataset, seed=cfg.seed)
        self.x, self.y, self.cfg, self.step = x, y, cfg, 0

    def run(self, steps: int) -> float:
        order = epoch_order(len(self.x), self.cfg.seed, self.step).to(self.x.device)
        idx = list(batches(order, self.cfg.batch_size))[:steps]
        sync(self.x.device)
        t0 = time.perf_counter()
        result = train_one_epoch(self.model, self.opt, self.x, self.y, idx, step=self.step,
                                 log_interval=self.cfg.log_interval, augment=self.augment)
        sync(self.x.device)
        self.step = result.step
        return sum(len(i) for i in idx) / (time.perf_counter() - t0)


def augment_only_ms(x: torch.Tensor, level: str, batch: int, reps: int = 50) -> float:
    xs = to_input(x[:batch])
    gen = step_generator(0, 0, x.device)
    augment_batch(xs, LEVELS[level], gen)
    sync(x.device)
    t0 = time.perf_counter()
    for step in range(reps):
        augment_batch(xs, LEVELS[level], step_generator(0, step, x.device))
    sync(x.device)
    return 1000 * (time.perf_counter() - t0) / reps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist-sample")
    parser.add_argument("--levels", default="light,medium,strong", help="comma-separated levels to compare with off")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (0: torch's default)")
    parser.add_argument("--reps", type=int, default=12, help="rounds (measurements per side)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per measurement")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="2 rounds of 2 steps, one level (numbers meaningless)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.levels, args.reps, args.steps, args.warmup = "medium", 2, 2, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    cfg = TrainConfig(dataset=args.dataset)
    ds = load_dataset(args.dataset, download=False)
    x, y = ds.train_x.to(device), ds.train_y.to(device)
    levels = ["off", *[name.strip() for name in args.levels.split(",") if name.strip()]]
    sides = {level: Side(level, x, y, cfg, args.dataset) for level in levels}
    for side in sides.values():
        side.run(args.warmup)
    results: dict[str, list[float]] = {level: [] for level in levels}
    alone: dict[str, list[float]] = {level: [] for level in levels[1:]}
    for rnd in range(args.reps):
        order = levels[rnd % len(levels):] + levels[:rnd % len(levels)]
        for level in order:
            results[level].append(sides[level].run(args.steps))
            if level != "off":
                alone[level].append(augment_only_ms(x, level, cfg.batch_size, reps=20))
        print(f"round {rnd + 1}: " + ", ".join(f"{lv} {v[-1]:,.0f}" for lv, v in results.items()), flush=True)
    print(f"\n{args.dataset} on {device} ({torch.get_num_threads()} threads), batch {cfg.batch_size}, "
          f"hidden {cfg.hidden_size}, {args.steps} steps x {args.reps} rounds, torch {torch.__version__}")
    print(f"{'level':<8} {'samples/s (median)':>19} {'range':>17} {'vs off':>7} {'round ratios':>15} "
          f"{'aug ms/batch':>13} {'share of a step':>16}")
    base = results["off"]
    step_ms = 1000 * cfg.batch_size / statistics.median(base)
    for level, values in results.items():
        ratios = [v / b for v, b in zip(values, base, strict=True)]
        ms = statistics.median(alone[level]) if level != "off" else 0.0
        print(f"{level:<8} {statistics.median(values):>19,.0f} {min(values):>8,.0f}-{max(values):<8,.0f} "
              f"{statistics.median(ratios):>7.3f} {min(ratios):>7.3f}-{max(ratios):<7.3f} "
              f"{ms:>13.2f} {100 * ms / step_ms:>15.1f}%")
    print(f"(a plain training step: {step_ms:.1f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
