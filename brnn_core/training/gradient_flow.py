"""Gradient flow through time, measured while a run trains: ‖∂ℓ/∂h_t‖ at every row t, per layer and direction.

The fused recurrent module returns only its last layer's states and no way to reach a step's h, so the probe
unrolls the layers from the model's own weights (brnn_core.unroll, the equations the look inside uses) with autograd
on, and asks autograd for the loss's gradient with respect to each step's h: the total derivative, which includes
the path back through the later rows (and an LSTM's cell state) and up through the layers above. Training itself
stays on the fused kernel and never sees the probe: it runs on a fixed batch of training images (no augmentation),
in fp32, without dropout, takes no random numbers and leaves no gradients on the weights. How often it runs
(`gradient_flow_every`) keeps its cost small: docs/decisions/020-gradient-flow-every.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from brnn_core.data.batching import to_input
from brnn_core.model import RecurrentClassifier
from brnn_core.runs.gradient_flow import GradientFlowRecord, append_records
from brnn_core.unroll import head_features, unroll


def measure_gradient_flow(model: RecurrentClassifier, images: torch.Tensor, labels: torch.Tensor, *, step: int = 0,
                          epoch: float = 0.0) -> list[GradientFlowRecord]:
    """One measurement on `images` (N, T, 28) in [0, 1] with `labels` (N,): a record per layer and direction."""
    labels = labels.to(next(model.parameters()).device)
    with torch.enable_grad(), torch.autocast(labels.device.type, enabled=False):
        layers = unroll(model, images)
        logits = model.head(head_features(model, layers[-1]))  # (N, C)
        # Summed, so the gradient at image b's h is that image's own loss's (h_b reaches no other image's loss)
        loss = F.cross_entropy(logits.float(), labels, reduction="sum")
        where = [(number, direction) for number, layer in enumerate(layers, 1) for direction in layer]
        states = [h for layer in layers for steps in layer.values() for h in steps["h"]]
        # Only the states' gradients: nothing accumulates on the weights (the next training step's are its own)
        grads = torch.autograd.grad(loss, states, allow_unused=True, materialize_grads=True)
    rows = len(layers[0]["forward"]["h"])
    norms = torch.stack([g.norm(dim=1).mean() for g in grads]).view(len(where), rows).cpu()  # one host sync
    return [GradientFlowRecord(step, epoch, number, direction, tuple(norms[k].tolist()))
            for k, (number, direction) in enumerate(where)]


def probe_batch(images: torch.Tensor, labels: torch.Tensor, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed batch every measurement of a run uses: `size` training images (uint8, as the split holds them)
    picked by the run's seed with a generator of their own, so training's random stream is untouched and a
    resume measures the same images. Fixed, so the rows of the heatmap differ by the weights, not the batch."""
    pick = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:size].to(images.device)
    return to_input(images[pick]), labels[pick]


@dataclass
class GradientFlowProbe:
    """fit's `probe` hook: every `every` steps, measure on the fixed batch and append to the run's file."""

    path: Path
    model: RecurrentClassifier
    images: torch.Tensor  # (N, T, 28) in [0, 1], on the model's device
    labels: torch.Tensor
    every: int
    steps_per_epoch: int

    def __call__(self, step: int, epoch: int, batch: int) -> None:
        if step % self.every == 0:
            append_records(self.path, measure_gradient_flow(self.model, self.images, self.labels, step=step,
                                                            epoch=epoch + batch / self.steps_per_epoch))


def gradient_flow_probe(path: Path, model: RecurrentClassifier, train_x: torch.Tensor, train_y: torch.Tensor, *,
                        every: int, batch_size: int, seed: int, steps_per_epoch: int) -> GradientFlowProbe | None:
    """The probe for a run (None when `every` is 0: not recorded)."""
    if every <= 0 or not len(train_x):
        return None
    images, labels = probe_batch(train_x, train_y, batch_size, seed)
    return GradientFlowProbe(Path(path), model, images, labels, every, steps_per_epoch)
