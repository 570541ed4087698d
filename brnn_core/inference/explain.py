"""Looking inside the network: what it thinks after each row, and which pixels pushed its answer.

`prefix_probabilities` runs the model on the first t+1 rows, for every t at once (one packed batch).
`integrated_gradients` is captum's, from a baseline (black by default; `row_importance` blanks whole rows). Its
backward pass through `nn.LSTM` in eval mode is refused by cuDNN (the blog's bug); training mode would turn
dropout on and change the answer being explained, so `backward_in_eval` keeps eval mode and turns cuDNN off:
PyTorch's own LSTM kernels run backward in any mode and compute the same function.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

from brnn_core.model import mode

IG_STEPS = 32  # integration steps; the completeness gap at 32 is a few % of the logit change (tests)
_CUDNN_OFF = threading.Lock()  # guards a process-wide flag, so it is process-wide too (Streamlit's sessions share it)
IG_MAX_STEPS = 512  # refined up to this many when the gap is larger (a model with saturated gates)
IG_CHUNK = 64  # integration steps per forward/backward pass when the caller may stop it (`should_stop`)


class Stopped(Exception):
    """Raised by `integrated_gradients` when its caller's `should_stop()` turned true: nobody wants the result."""


@contextlib.contextmanager
def backward_in_eval() -> Iterator[None]:
    """cuDNN off for the block, so backward through an eval-mode LSTM is allowed (dropout stays off).

    The flag is process-wide while the block runs: a forward pass in another thread meanwhile uses
    PyTorch's native kernels too (same results, a little slower). Training runs in its own process.
    One block at a time (`_CUDNN_OFF`): the flag is restored on exit, so a second block overlapping the first
    would otherwise find cuDNN back on halfway, and its eval-mode backward refused.
    """
    with _CUDNN_OFF, torch.backends.cudnn.flags(enabled=False):
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


def baseline_image(x: torch.Tensor, kind: str = "black") -> torch.Tensor:
    """The image integrated gradients starts from: black (zeros), the digit blurred, or uniform grey (0.5).

    A black baseline gives black pixels exactly zero attribution by construction (they never differ from it);
    a blurred one asks what the sharp strokes add; grey treats ink and background alike."""
    if kind == "black":
        return torch.zeros_like(x)
    if kind == "grey":
        return torch.full_like(x, 0.5)
    if kind == "blurred":
        blurred = x[None, None]
        for _ in range(3):  # three 5x5 box blurs: close to a Gaussian of about 2.5 px
            blurred = nn.functional.avg_pool2d(blurred, 5, stride=1, padding=2, count_include_pad=False)
        return blurred[0, 0]
    raise ValueError(f"unknown baseline {kind!r}; choose one of {', '.join(BASELINES)}")


BASELINES = ("black", "blurred", "grey")


def integrated_gradients(model: nn.Module, x: torch.Tensor, target: int | None = None,
                         n_steps: int = IG_STEPS, baseline: str = "black",
                         should_stop: Callable[[], bool] | None = None) -> tuple[np.ndarray, int, float]:
    """Attribution (T, 28) of the target class's logit to each pixel, the target, and captum's gap.

    From a black (all-zero) baseline, attribution = pixel value x mean gradient along the path, so
    background pixels (exactly 0) get exactly 0 and the mass sits on the ink (`baseline_image` for the
    others). The attributions sum to logit(x) - logit(baseline) up to the returned convergence gap.
    `should_stop`: asked before every IG_CHUNK steps; when it says True, `Stopped` is raised (a drawing that
    changed meanwhile: the dashboard's explanations).
    """
    from captum.attr import IntegratedGradients  # lazy: captum takes seconds to import; only attribution needs it

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        if should_stop is not None and should_stop():
            raise Stopped("integrated gradients stopped: the result is no longer wanted")
        return model(inputs)

    device = next(model.parameters()).device
    inp = x.to(device=device, dtype=torch.float32).unsqueeze(0)  # (1, T, 28)
    start = baseline_image(inp[0], baseline)[None]  # in the model's input space
    with torch.enable_grad(), mode(model, False), backward_in_eval():
        if target is None:
            with torch.no_grad():
                target = int(model(inp).argmax(dim=1))
        ig = IntegratedGradients(forward)
        while True:  # saturated LSTM gates can need a finer path: refine until the sums add up (completeness)
            attr, delta = ig.attribute(inp, baselines=start, target=int(target), n_steps=n_steps,
                                       internal_batch_size=IG_CHUNK if should_stop is not None else None,
                                       return_convergence_delta=True)
            total = float(attr.sum())
            if n_steps >= IG_MAX_STEPS or float(delta.abs().max()) <= 0.02 * abs(total) + 0.02:
                break
            n_steps *= 4
    return attr[0].detach().float().cpu().numpy(), int(target), float(delta.abs().max())


def log_odds(logits: torch.Tensor, target: int) -> torch.Tensor:
    """(B,) ln(P(target) / P(not target)) from (B, C) logits: unlike the probability it keeps telling confident
    answers apart (P 0.9999 and 0.99 are 9.2 and 4.6), and a drop of ln 10 = 2.3 means the odds fell tenfold."""
    logp = torch.log_softmax(logits.float(), dim=1)  # (B, C)
    others = torch.cat([logp[:, :target], logp[:, target + 1:]], dim=1)  # (B, C - 1)
    return logp[:, target] - torch.logsumexp(others, dim=1)


@torch.no_grad()
def row_importance(model: nn.Module, x: torch.Tensor, target: int, temperature: float = 1.0) -> np.ndarray:
    """(T,): how much the log-odds of class `target` (`log_odds`, logits divided by `temperature`) drops when row t
    is blanked (set to 0), each row in turn, in one batch. Measured per row before any attribution within it:
    saliency alone fades towards the first rows a recurrent model reads. The log-odds, not the probability: for a
    confident answer every row's probability drop is a fraction of a point. A row that is already blank changes
    nothing (exactly 0)."""
    device = next(model.parameters()).device
    x = x.to(device=device, dtype=torch.float32)
    rows = len(x)
    batch = x.repeat(rows + 1, 1, 1)  # (T+1, T, 28): the image itself, then one with each row blanked
    batch[torch.arange(1, rows + 1), torch.arange(rows)] = 0.0
    with mode(model, False):
        odds = log_odds(model(batch) / temperature, target)  # (T+1,)
    drop = odds[0] - odds[1:]
    drop[x.abs().sum(dim=1) == 0] = 0.0  # the same input: exactly no change (not a float's noise)
    return drop.cpu().numpy()


def randomized_copy(model: nn.Module, seed: int = 0) -> nn.Module:
    """A copy of `model` with every weight drawn afresh (PyTorch's initialisation): the sanity check for an
    attribution, which explains nothing if it looks the same for this copy (Adebayo et al., 2018)."""
    import copy

    twin = copy.deepcopy(model)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        for module in twin.modules():
            if module is not twin and hasattr(module, "reset_parameters"):
                module.reset_parameters()
    finally:
        torch.random.set_rng_state(generator_state)  # the caller's random stream is left as it was
    return twin
