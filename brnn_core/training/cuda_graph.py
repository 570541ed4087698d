"""The training step captured in a CUDA graph and replayed: one launch instead of hundreds of small ones.

At batch 100 a BiLSTM step is bound by kernel launches (28 time steps, layers and directions, the optimizer),
so on a GPU the Python and launch overhead, not the arithmetic, sets the speed. `GraphedStep` runs a few steps
eagerly (cuDNN and the allocator settle), captures one step of that batch shape, then replays it; any other
shape (the last partial batch) runs eagerly. Off the GPU, with fp16 loss scaling (it decides on the host) or
LSTM dropout, and after a capture that failed, every step runs eagerly: exactly the plain step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

StepFn = Callable[..., tuple[torch.Tensor, int]]  # (model, optimizer, x, y, amp, scaler, clip) -> (loss, classes)
WARMUP_STEPS = 3  # eager steps of a shape before its capture (cuDNN picks its kernels, Adam makes its state)


def graph_problem(model: nn.Module, optimizer: torch.optim.Optimizer, amp: str, device: torch.device) -> str | None:
    """Why the training step cannot be captured here, or None when it can."""
    if device.type != "cuda":
        return "not a CUDA device"
    if amp == "fp16":
        return "fp16 loss scaling skips steps from the host"
    if any(isinstance(m, nn.RNNBase) and m.dropout > 0 for m in model.modules()):
        return "LSTM dropout draws its masks in cuDNN's own state"
    if not all(group.get("fused") for group in optimizer.param_groups):
        return "the optimizer is not fused (only fused Adam/AdamW update on the GPU alone)"
    return None


class GraphedStep:
    """`step(model, optimizer, x, y, amp, scaler, clip)` like `step_fn`, replayed from a CUDA graph where it can.

    One per run (fit keeps it across epochs). The graph reads the lr from a device tensor refilled from the
    optimizer's param group before each replay, so the schedule and live changes still apply; a new grad clip
    captures again."""

    def __init__(self, step_fn: StepFn, problem: str | None):
        self.step_fn = step_fn
        self.problem = problem  # None while graphs are in use; why not, otherwise
        self.graph: torch.cuda.CUDAGraph | None = None
        self.shape: tuple | None = None
        self.clip: float | None = None
        self.seen = 0  # eager steps of `key` so far
        self.static: dict[str, torch.Tensor] = {}
        self.replays = 0

    @classmethod
    def for_run(cls, step_fn: StepFn, model: nn.Module, optimizer: torch.optim.Optimizer, amp: str,
                device: torch.device, enabled: bool = True) -> GraphedStep:
        problem = graph_problem(model, optimizer, amp, device) if enabled else "turned off"
        return cls(step_fn, problem)

    def __call__(self, model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                 amp: str, scaler, clip: float) -> tuple[torch.Tensor, int]:
        if self.problem is not None or scaler is not None:  # loss scaling (fp16, asked or automatic): eagerly
            return self.step_fn(model, optimizer, x, y, amp, scaler, clip)
        self.shape = self.shape or tuple(x.shape)  # the first batch's: every full batch has it
        if tuple(x.shape) != self.shape:
            return self.step_fn(model, optimizer, x, y, amp, scaler, clip)  # a partial batch: eagerly
        if float(clip) != self.clip:  # baked into the graph: a live change captures again
            self.graph, self.clip, self.seen = None, float(clip), 0
        if self.graph is None and self.seen < WARMUP_STEPS:
            self.seen += 1
            return self._on_side_stream(model, optimizer, x, y, amp, scaler, clip)
        if self.graph is None and not self._capture(model, optimizer, x, y, amp, scaler, clip):
            return self.step_fn(model, optimizer, x, y, amp, scaler, clip)
        self.static["x"].copy_(x)
        self.static["y"].copy_(y)
        self.static["lr"].fill_(float(optimizer.param_groups[0]["lr"]))
        self.graph.replay()
        self.replays += 1
        return self.static["loss"], self.static["classes"]

    def _on_side_stream(self, model, optimizer, x, y, amp, scaler, clip):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = self.step_fn(model, optimizer, x, y, amp, scaler, clip)
        torch.cuda.current_stream().wait_stream(side)
        return out

    def _capture(self, model, optimizer, x, y, amp, scaler, clip) -> bool:
        """Capture one step on static copies of this batch; False (and eager steps from now on) if it fails."""
        groups = optimizer.param_groups
        lrs = [g["lr"] for g in groups]
        lr = torch.tensor(float(lrs[0]), device=x.device)
        self.static = {"x": x.clone(), "y": y.clone(), "lr": lr}
        graph = torch.cuda.CUDAGraph()
        cache = torch.is_autocast_cache_enabled()
        try:
            optimizer.zero_grad(set_to_none=True)  # the graph's backward then allocates the grads in its pool
            torch.set_autocast_cache_enabled(False)  # cast weights must be recomputed at every replay
            for g in groups:
                g["lr"], g["capturable"] = lr, True
            with torch.cuda.graph(graph):
                loss, classes = self.step_fn(model, optimizer, self.static["x"], self.static["y"], amp, scaler,
                                             clip)
        except Exception as exc:  # noqa: BLE001 - any failure means: train eagerly, as without graphs
            self.problem, self.graph = f"capture failed: {type(exc).__name__}: {exc}", None
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
            return False
        finally:
            torch.set_autocast_cache_enabled(cache)
            for g, old in zip(groups, lrs, strict=True):
                g["lr"], g["capturable"] = old, False  # checkpoints keep plain values, loadable on any device
        self.graph = graph
        self.static.update(loss=loss, classes=classes)
        return True
