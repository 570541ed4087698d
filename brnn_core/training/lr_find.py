"""The learning-rate range test (fastai's lr_find, Smith 2015): train a throwaway copy of the model for a few
hundred steps while the lr grows exponentially from `start` to `end`, stop when the loss explodes, and suggest
a peak lr from the smoothed loss curve. Nothing is saved but the curve; no run is created.

Two rules read the curve (RULES); the suggestion is DEFAULT_RULE's, chosen by the 5-epoch runs of
docs/decisions/017-lr-finder-rule.md, and printed with its rule. Both rules are written to the summary file.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from brnn_core.config import TrainConfig
from brnn_core.data.batching import epoch_order, to_input
from brnn_core.model import RecurrentClassifier, mode
from brnn_core.training.engine import make_optimizer
from brnn_core.training.splits import load_splits, model_config_for, prepare_device

START, END, STEPS = 1e-6, 1.0, 200
BETA = 0.98  # the smoothing of the loss curve (an exponential moving average, debiased)
EXPLODES = 4.0  # stop once the smoothed loss is this many times its lowest
SAFETY = 3.0  # "steepest": the steepest descent's lr over this
RULES = {
    "minimum": "a tenth of the lr where the smoothed loss is lowest",
    "steepest": f"the steepest fall of the smoothed loss against log(lr), divided by {SAFETY:g}",
}
DEFAULT_RULE = "minimum"
RULE = RULES[DEFAULT_RULE]


@dataclass(frozen=True)
class LrCurve:
    lrs: list[float]
    losses: list[float]
    smoothed: list[float]
    suggestion: float | None  # DEFAULT_RULE's; None when the curve never fell
    stopped_early: bool  # the loss exploded before `end`

    def suggestions(self) -> dict[str, float | None]:
        """Every rule's suggestion for this curve."""
        return {rule: suggest(self.lrs, self.smoothed, rule) for rule in RULES}

    def write_csv(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(["lr", "loss", "smoothed_loss"])
            out.writerows(zip(self.lrs, self.losses, self.smoothed, strict=True))
        return path


def range_test(model: RecurrentClassifier, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, *,
               batch_size: int, seed: int = 0, start: float = START, end: float = END, steps: int = STEPS,
               clip: float = 0.0, progress: Callable[[int, int], None] | None = None) -> LrCurve:
    """The range test on `model` (changed: pass a copy) with uint8 images `x` and labels `y`."""
    if not 0 < start < end:
        raise ValueError(f"the lr range must grow: start {start:g}, end {end:g}")
    factor = (end / start) ** (1 / max(steps - 1, 1))
    order = epoch_order(len(x), seed, 0)
    lrs, losses, smoothed = [], [], []
    average, best = 0.0, math.inf
    stopped = False
    for group in optimizer.param_groups:  # the schedule multiplies the optimizer's own lr: it must be `start`
        if not math.isclose(group["lr"], start):
            raise ValueError(f"the optimizer's lr is {group['lr']:g}: make it with lr={start:g}")
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: factor**k)  # start x factor^k
    with mode(model, True):
        for k in range(steps):
            lr = schedule.get_last_lr()[0]
            begin = (k * batch_size) % max(len(x) - batch_size + 1, 1)
            idx = order[begin:begin + batch_size]
            inputs = to_input(x[idx])
            loss = torch.nn.functional.cross_entropy(model(inputs), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            schedule.step()
            value = float(loss.detach())
            average = BETA * average + (1 - BETA) * value
            smooth = average / (1 - BETA ** (k + 1))
            lrs.append(lr)
            losses.append(value)
            smoothed.append(smooth)
            best = min(best, smooth)
            if progress is not None:
                progress(k + 1, steps)
            if not math.isfinite(value) or smooth > EXPLODES * best:
                stopped = k + 1 < steps
                break
    return LrCurve(lrs, losses, smoothed, suggest(lrs, smoothed), stopped)


def suggest(lrs: list[float], smoothed: list[float], rule: str = DEFAULT_RULE) -> float | None:
    """`rule` (RULES) over the curve, leaving out its first and last tenth (warm-up noise, the explosion);
    None when the loss never fell (by 1 % at least)."""
    if len(lrs) < 10:
        return None
    log_lr, loss = np.log(np.asarray(lrs)), np.asarray(smoothed)
    lo, hi = len(lrs) // 10, len(lrs) - max(len(lrs) // 10, 1)
    if loss[lo:hi].min() > 0.99 * loss[lo]:
        return None
    if rule == "minimum":
        return float(lrs[lo + int(np.argmin(loss[lo:hi]))] / 10)
    slope = np.gradient(loss, log_lr)
    k = lo + int(np.argmin(slope[lo:hi]))
    return float(lrs[k] / SAFETY) if slope[k] < 0 else None


def find_lr(cfg: TrainConfig, data_dir: Path, *, steps: int = STEPS, start: float = START, end: float = END,
            progress: Callable[[str], None] | None = None) -> LrCurve:
    """The range test for `cfg` (its model, optimizer, batch size, dataset and seed) on its training split."""
    device = prepare_device(cfg)
    splits = load_splits(cfg, data_dir, device, progress or (lambda message: None))
    torch.manual_seed(cfg.seed)
    model = RecurrentClassifier(model_config_for(cfg, len(splits.classes))).to(device)
    optimizer = make_optimizer(model.parameters(), cfg.optimizer, start, cfg.weight_decay, cfg.momentum)

    def said(k: int, n: int) -> None:
        if progress is not None and (k % 20 == 0 or k == n):
            progress(f"lr range test: step {k}/{n}")

    return range_test(model, optimizer, splits.train_x, splits.train_y, batch_size=cfg.batch_size, seed=cfg.seed,
                      start=start, end=end, steps=steps, clip=cfg.grad_clip, progress=said)
