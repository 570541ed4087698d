"""What the benchmarks share: their sizes (`--quick` or full), the device, datasets loaded once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

from brnn_core.data.datasets import Dataset, DatasetError
from brnn_core.data.loading import load_dataset
from brnn_core.devices import cpu_has_bf16

T = TypeVar("T")


@dataclass
class Sizes:
    """How much work each benchmark does; `--quick` shrinks everything to a smoke run."""

    train_steps: int = 40  # optimizer steps per training measurement
    warmup_steps: int = 5  # untimed steps before the first measurement of each side
    reps: int = 5  # measurements per side in alternated comparisons
    eval_reps: int = 3
    eval_dataset: str = "fashion-mnist"  # its 10k test set when on disk, else mnist-sample's
    worker_reps: int = 3
    worker_overrides: dict = field(default_factory=dict)  # TrainConfig changes for the worker run
    worker_warmup: bool = True  # one untimed worker run first
    predict_calls: int = 300
    scaling_batches: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    scaling_hidden: tuple[int, ...] = (64, 128, 256, 512)
    scaling_eval_batches: tuple[int, ...] = (100, 250, 500, 1000, 2000, 5000)
    scaling_eval_images: int = 5000
    scaling_seconds: float = 1.0  # each scaling point trains at least this long (and 2 steps) per sweep
    scaling_sweeps: int = 3  # round-robin passes over all scaling points
    breakdown_steps: int = 20
    quick_data: bool = False  # the defaults row on mnist-sample instead of fashion-mnist
    default_reps: int = 3  # alternated CLI-run / blog-epoch pairs (defaults rows)
    default_hidden: int | None = None  # None: the default network; --quick trains a narrower one on both sides
    train_variants: bool = True  # the train bench's host-sync and default-allocator sides (a fresh process each)
    local_sides: tuple[str, ...] = ()  # benches whose sides run in this process (child.LocalSide), not fresh ones

    @classmethod
    def quick(cls) -> Sizes:
        """A smoke run: every benchmark's rows, each measured as briefly as it allows, from fewer processes."""
        return cls(train_steps=2, warmup_steps=1, reps=2, eval_reps=1, eval_dataset="mnist-sample", worker_reps=1,
                   quick_data=True, default_reps=1, default_hidden=32,
                   worker_overrides={"val_fraction": 0.5, "log_interval": 5, "hidden_size": 32}, worker_warmup=False,
                   predict_calls=30,
                   scaling_batches=(32, 64), scaling_hidden=(64, 128), scaling_eval_batches=(100, 500),
                   scaling_eval_images=500, scaling_seconds=0.2, scaling_sweeps=1, breakdown_steps=3,
                   # each fresh process costs seconds of imports before any work: the train bench leaves out its
                   # host-sync and default-allocator sides, and the eval and defaults sides run in this process
                   # (the train and worker benches still start theirs, so the child path stays exercised)
                   train_variants=False, local_sides=("eval", "defaults"))


def sync(device: torch.device) -> None:
    """Wait for the device's queued work: without it a CUDA timing measures only the kernel launches."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], T]) -> tuple[T, float]:
    """(fn(), seconds), the device synchronised before and after."""
    sync(device)
    t0 = time.perf_counter()
    result = fn()
    sync(device)
    return result, time.perf_counter() - t0


@dataclass
class Context:
    """What every benchmark gets: the device, the sizes, a log, a scratch folder, datasets loaded once."""

    device: torch.device
    sizes: Sizes
    log: Callable[[str], None]
    workdir: Path
    _datasets: dict = field(default_factory=dict)
    worker_peaks_mb: list[float] = field(default_factory=list)  # filled by the worker benchmark
    tuned: bool = False  # brnn_core.training.allocator applied in this process (CPU, as the worker does)

    def dataset(self, name: str) -> Dataset:
        if name not in self._datasets:
            t0 = time.perf_counter()
            self._datasets[name] = load_dataset(name, download=False)
            self.log(f"loaded {name} in {time.perf_counter() - t0:.1f}s")
        return self._datasets[name]

    def train_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        ds = self.dataset("mnist-sample")
        return ds.train_x, ds.train_y

    def eval_data(self) -> tuple[str, torch.Tensor, torch.Tensor]:
        """The eval benchmark's test set: fashion-mnist's 10k when on disk, else mnist-sample's 500."""
        name = self.sizes.eval_dataset
        if name != "mnist-sample":
            try:
                ds = self.dataset(name)
                return name, ds.test_x, ds.test_y
            except DatasetError as exc:
                self.log(f"{name} not available ({str(exc)[:80]}...); using mnist-sample's test set")
        ds = self.dataset("mnist-sample")
        return "mnist-sample", ds.test_x, ds.test_y

    def amp_modes(self) -> list[str]:
        """The precisions this device can train and evaluate in ("off" = fp32 first)."""
        if self.device.type == "cuda":
            modes = ["off", "fp16"]
            if torch.cuda.is_bf16_supported():
                modes.insert(1, "bf16")
            return modes
        if self.device.type == "cpu" and cpu_has_bf16():  # oneDNN's LSTM refuses bf16 without native support
            return ["off", "bf16"]
        return ["off"]
