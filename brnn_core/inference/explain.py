"""Looking inside the BiLSTM: what it thinks after each row, and which pixels pushed its answer.

`prefix_probabilities` runs the model on the first t+1 rows, for every t at once (one packed batch).
`integrated_gradients` is captum's, from a black baseline (the zero image in the model's input space). Its
backward pass through `nn.LSTM` in eval mode is refused by cuDNN (the blog's bug); training mode would turn
dropout on and change the answer being explained, so `backward_in_eval` keeps eval mode and turns cuDNN off:
PyTorch's own LSTM kernels run backward in any mode and compute the same function.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from brnn_core.model import mode

IG_STEPS = 32  # integration steps; the completeness gap at 32 is a few % of the logit change (tests)
IG_MAX_STEPS = 512  # refined up to this many when the gap is larger (a model with saturated gates)


@contextlib.contextmanager
def backward_in_eval() -> Iterator[None]:
    """cuDNN off for the block, so backward through an eval-mode LSTM is allowed (dropout stays off).

    The flag is process-wide while the block runs: a forward pass in another thread meanwhile uses
    PyTorch's native kernels too (same results, a little slower). Training runs in its own process.
    """
    with torch.backends.cudnn.flags(enabled=False):
        yield


def prefix_probabilities(model: nn.Module, x: torch.Tensor, temperature: float = 1.0) -> np.ndarray:
    """(T, C) class probabilities; row t after reading rows 0..t of `x` (T, 28) only, logits divided by
    `temperature` (the checkpoint's calibration)."""
    device = next(model.parameters()).device
    steps = x.shape[0]
    prefixes = x.to(device).unsqueeze(0).expand(steps, -1, -1)  # (T, T, 28): prefix t reads rows 0..t
    lengths = torch.arange(1, steps + 1)  # (T,)
    with torch.inference_mode(), mode(model, False):
        logits = model(prefixes, lengths)  # (T, C)
    return (logits.float() / temperature).softmax(dim=1).cpu().numpy()


def integrated_gradients(model: nn.Module, x: torch.Tensor, target: int | None = None,
                         n_steps: int = IG_STEPS) -> tuple[np.ndarray, int, float]:
    """Attribution (T, 28) of the target class's logit to each pixel, the target, and captum's gap.

    With a black (all-zero) baseline, attribution = pixel value x mean gradient along the path, so
    background pixels (exactly 0) get exactly 0 and the mass sits on the ink. The attributions sum
    to logit(x) - logit(black) up to the returned convergence gap (completeness).
    """
    from captum.attr import IntegratedGradients  # lazy: captum takes seconds to import; only attribution needs it

    device = next(model.parameters()).device
    inp = x.to(device=device, dtype=torch.float32).unsqueeze(0)  # (1, T, 28)
    baseline = torch.zeros_like(inp)  # a 0 pixel in the model's input space
    with torch.enable_grad(), mode(model, False), backward_in_eval():
        if target is None:
            with torch.no_grad():
                target = int(model(inp).argmax(dim=1))
        ig = IntegratedGradients(model)
        while True:  # saturated LSTM gates can need a finer path: refine until the sums add up (completeness)
            attr, delta = ig.attribute(inp, baselines=baseline, target=int(target), n_steps=n_steps,
                                       return_convergence_delta=True)
            total = float(attr.sum())
            if n_steps >= IG_MAX_STEPS or float(delta.abs().max()) <= 0.02 * abs(total) + 0.02:
                break
            n_steps *= 4
    return attr[0].detach().float().cpu().numpy(), int(target), float(delta.abs().max())
