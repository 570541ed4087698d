"""The two sides of each comparison: brnn_core's engine and the blog script's loops, one class per job.

A trainer's `run(steps)` returns (samples, seconds); an evaluator's `run()` times a whole test set.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from benchmarks.harness import blog_baseline as blog
from benchmarks.harness.context import timed
from brnn_core.config import TrainConfig
from brnn_core.data.batching import batches, epoch_order
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.training.engine import evaluate, grad_scaler, graphed_step, make_optimizer, train_one_epoch
from brnn_core.training.splits import model_config_for


class Trainer:
    """A training side: `run(steps)` trains that many steps and returns (samples, seconds)."""

    def run(self, steps: int) -> tuple[int, float]:
        raise NotImplementedError

    def samples_per_s(self, steps: int) -> float:
        samples, seconds = self.run(steps)
        return samples / seconds


class EngineTrainer(Trainer):
    """brnn_core's training path: device-resident uint8 data, engine.train_one_epoch."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, device: torch.device, *, hidden_size: int | None = None,
                 batch_size: int | None = None, amp: str = "off", log_interval: int | None = None, seed: int = 0,
                 graphs: bool = False, network: dict | None = None):
        cfg = TrainConfig(**(network or {}))  # network: another cell or direction, e.g. {"cell": "gru"}
        self.device = device
        self.batch_size = batch_size or cfg.batch_size
        self.amp = amp
        self.log_interval = log_interval or cfg.log_interval
        torch.manual_seed(seed)
        self.model = RecurrentClassifier(model_config_for(cfg, 10, hidden_size)).to(device)
        self.optimizer = make_optimizer(self.model.parameters(), cfg.optimizer, cfg.lr, cfg.weight_decay,
                                        cfg.momentum)
        self.x, self.y = x.to(device), y.to(device)
        self.scaler = grad_scaler(device, amp)  # fp16: loss scaling as fit does it, kept across measurements
        # graphs: the step replayed from a CUDA graph as fit does on a GPU (engine.graphed_step); off: eagerly
        self.graph = graphed_step(self.model, self.optimizer, amp, device) if graphs else None
        self.seed, self.epoch, self.pending = seed, 0, iter(())

    def _index_batches(self, steps: int) -> Iterator[torch.Tensor]:
        """`steps` full batches of shuffled indices, a new permutation per epoch as in engine.fit."""
        for _ in range(steps):
            idx = next(self.pending, None)
            if idx is None or len(idx) < self.batch_size:
                order = epoch_order(len(self.x), self.seed, self.epoch).to(self.device)
                self.epoch += 1
                self.pending = batches(order, min(self.batch_size, len(order)))
                idx = next(self.pending)
            yield idx

    def run(self, steps: int) -> tuple[int, float]:
        """Train `steps` steps; (samples, seconds)."""
        result, seconds = timed(self.device, lambda: train_one_epoch(
            self.model, self.optimizer, self.x, self.y, self._index_batches(steps), log_interval=self.log_interval,
            amp=self.amp, scaler=self.scaler, graph=self.graph))
        if result.diverged:
            raise RuntimeError("the benchmark model diverged; the numbers would be meaningless")
        return result.batches_done * self.batch_size, seconds



class BlogTrainer(Trainer):
    """The blog script's training loop (benchmarks.harness.blog_baseline) on the same uint8 images."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, device: torch.device, seed: int = 0,
                 hidden_size: int | None = None):
        cfg = TrainConfig()
        self.device = device
        torch.manual_seed(seed)
        self.model, self.criterion = blog.make_model(device, hidden_size=hidden_size or cfg.hidden_size,
                                                     num_layers=cfg.num_layers)
        self.optimizer = blog.make_optimizer(self.model, cfg.lr)
        self.loader = blog.make_loader(x, y, batch_size=cfg.batch_size, shuffle=True)

    def run(self, steps: int) -> tuple[int, float]:
        """Train `steps` steps; (samples, seconds)."""
        return timed(self.device, lambda: self._train(steps))

    def _train(self, steps: int) -> int:
        done = samples = 0
        while done < steps:  # one call = one of the script's epochs (a fresh DataLoader iterator)
            _, n_steps, n_samples = blog.train_steps(self.model, self.loader, self.criterion, self.optimizer,
                                                     self.device, max_steps=steps - done, log=_quiet)
            done, samples = done + n_steps, samples + n_samples
        return samples


def _quiet(_: str) -> None:
    pass


class EngineEvaluator:
    """engine.evaluate over a whole test set on the device, at the default eval batch."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, device: torch.device, amp: str = "off"):
        self.device, self.batch_size, self.amp = device, TrainConfig().eval_batch_size, amp
        torch.manual_seed(0)
        self.model = RecurrentClassifier(ModelConfig()).to(device)
        self.x, self.y = x.to(device), y.to(device)

    def run(self, warmup: bool = False) -> dict:
        n = min(len(self.x), 2 * self.batch_size) if warmup else len(self.x)
        result, seconds = timed(self.device, lambda: evaluate(self.model, self.x[:n], self.y[:n],
                                                              batch_size=self.batch_size, amp=self.amp))
        return {"seconds": seconds, "n": n, "accuracy": result.accuracy}


class BlogEvaluator:
    """The blog's evaluation loop: DataLoader of PIL images, batch 100, loss.item() per batch."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, device: torch.device):
        self.device = device
        self.loader = blog.make_loader(x, y, batch_size=100, shuffle=False)
        self.warm_loader = blog.make_loader(x[:200], y[:200], batch_size=100, shuffle=False)
        torch.manual_seed(0)
        self.model, self.criterion = blog.make_model(device)

    def run(self, warmup: bool = False) -> dict:
        loader = self.warm_loader if warmup else self.loader
        (_, accuracy), seconds = timed(self.device, lambda: blog.evaluate(self.model, loader, self.criterion,
                                                                         self.device))
        return {"seconds": seconds, "n": len(loader.dataset), "accuracy": accuracy}
