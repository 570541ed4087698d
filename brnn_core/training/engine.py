"""Training and evaluation loops. Every train/eval switch goes through `model.mode()`.

The blog script validated in eval mode and never switched back, so its epoch 2 ran backward in eval mode, which
cuDNN's LSTM refuses. Here `train_one_epoch` always enters training mode and `evaluate` always enters eval mode
and restores the previous one, whatever the order. The loss is read back (a GPU sync) only every `log_interval`
steps; a non-finite value there stops the epoch as diverged, and so does a loss far worse than guessing, log
after log (`ExplosionWatch`).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from brnn_core.data.batching import batches, epoch_order, to_input
from brnn_core.devices import resolve_amp
from brnn_core.model import mode
from brnn_core.training.cuda_graph import GraphedStep
from brnn_core.training.loss_scaling import LossScaler


def autocast(device: torch.device, amp: str):
    """Mixed-precision context for `amp` in (auto, off, bf16, fp16); auto as `devices.resolve_amp` decides."""
    amp = resolve_amp(amp, device)
    if amp == "off":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, amp: str) -> LossScaler | None:
    """Loss scaling for fp16 training (bf16 has fp32's range and needs none); it counts the steps it skips."""
    return LossScaler(device.type) if resolve_amp(amp, device) == "fp16" else None


# best.pt is chosen on validation in fp32: a reduced-precision forward pass moves a few predictions and the
# loss that picks it (docs/decisions/016-amp-auto.md); the validation split is small, so it costs little.
VALIDATION_AMP = "off"


# A finite explosion is a diverged run too: SGD at lr=10 takes the loss from 2.3 to over 1,000 and the
# accuracy to chance while every number stays finite. The reference is ln(C), the loss of a uniform guess
# over C classes, which is where an untrained model starts: a loss EXPLODED_FACTOR times that is far worse
# than knowing nothing, which healthy training (noisy or resumed) never logs; EXPLODED_LOGS logs in a row
# (30 steps at the default log interval) rule out one unlucky batch.
EXPLODED_FACTOR = 10.0
EXPLODED_LOGS = 3


@dataclass
class ExplosionWatch:
    """Counts logged training losses above the explosion limit in a row; `fit` keeps one per run."""

    factor: float = EXPLODED_FACTOR
    logs: int = EXPLODED_LOGS
    streak: int = 0

    def limit(self, num_classes: int) -> float:
        return self.factor * math.log(max(num_classes, 2))

    def above(self, loss: float, num_classes: int) -> bool:
        return loss > self.limit(num_classes)

    def observe(self, loss: float, num_classes: int) -> str:
        """Record one logged loss; returns why the run diverged, or "" while it has not."""
        self.streak = self.streak + 1 if self.above(loss, num_classes) else 0
        if self.streak < self.logs:
            return ""
        return (f"the training loss stayed above {self.limit(num_classes):.1f} ({self.factor:g}x the "
                f"{math.log(max(num_classes, 2)):.2f} of guessing at random) for {self.logs} logs in a row "
                f"(last {loss:.4g})")


NOT_FINITE = "the loss became NaN or infinite"


def make_optimizer(params: Iterable[torch.Tensor], name: str, lr: float, weight_decay: float = 0.0,
                   momentum: float = 0.9) -> torch.optim.Optimizer:
    """The optimizer `name`; Adam and AdamW on CUDA run fused: one kernel per step, and fp16's loss scaler
    then checks for overflow without reading the GPU back every step."""
    params = list(params)
    fused = {"fused": True} if params and all(p.device.type == "cuda" for p in params) else {}
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, **fused)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **fused)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; use adam, adamw or sgd")


@dataclass
class LogPoint:
    """What a training step log reports (one row of metrics.csv, split=train)."""

    step: int
    batch: int  # batches done in this epoch
    loss: float  # mean over the steps since the previous log
    samples_per_s: float
    lr: float
    exploding: bool = False  # loss above the explosion limit: these weights are not worth saving


@dataclass
class EpochResult:
    step: int  # global optimizer step after the epoch
    batches_done: int  # batches of this epoch that ran
    loss: float  # mean training loss over those batches (nan if none)
    completed: bool  # every batch ran
    diverged: bool = False
    stopped: bool = False
    reason: str = ""  # why it diverged, in words


@dataclass
class EvalResult:
    loss: float
    accuracy: float
    predictions: torch.Tensor  # (N,) predicted class, on CPU
    probabilities: torch.Tensor  # (N, C) softmax, on CPU
    per_class: list[float] = field(default_factory=list)  # accuracy per true class (nan if absent)


def train_one_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
                    labels: torch.Tensor, index_batches: Iterable[torch.Tensor], *, step: int = 0,
                    batch_offset: int = 0, grad_clip: Callable[[], float] = lambda: 0.0,
                    log_interval: int = 10, on_log: Callable[[LogPoint], None] | None = None,
                    before_step: Callable[[int], bool] | None = None, amp: str = "off",
                    scaler: torch.amp.GradScaler | None = None,
                    augment: Callable[[torch.Tensor, int], torch.Tensor] | None = None,
                    watch: ExplosionWatch | None = None, graph: GraphedStep | None = None,
                    probe: Callable[[int, int], None] = lambda step, batch: None) -> EpochResult:
    """One pass of optimizer steps over `index_batches` (index tensors into images/labels).

    `images` are uint8 (N, 28, 28) already on the model's device. `before_step(step)` is called between steps (live
    controls, pause); returning False stops the epoch early. `grad_clip()` is read every step so it can change while
    training. With amp="fp16" the loss is scaled (`scaler`, one per run as fit passes it): small fp16 gradients
    underflow to zero otherwise. `augment(x, step)` changes each training batch (model input in [0, 1]) before the
    forward pass; `watch` ends the epoch as diverged when the logged loss explodes (see ExplosionWatch); `graph`
    replays the step from a CUDA graph where it can (cuda_graph.py), the plain step otherwise. `probe(step, batch)`
    runs before each step that goes ahead (a measurement on the weights so far); its time counts as training time.
    """
    device = images.device
    scaler = scaler or grad_scaler(device, amp)  # None unless fp16
    watch = watch or ExplosionWatch()
    running, total = torch.zeros((), device=device), torch.zeros((), device=device)  # loss sums: since the log, epoch
    since_log = batches = samples = 0
    last_time = time.perf_counter()
    with mode(model, True):
        for idx in index_batches:
            if before_step is not None:
                t0 = time.perf_counter()
                if not before_step(step):
                    return EpochResult(step, batch_offset + batches, _mean(total, batches), False, stopped=True)
                last_time += time.perf_counter() - t0  # time spent paused is not training time
            probe(step, batch_offset + batches)
            x = to_input(images[idx])  # (B, 28, 28)
            if augment is not None:
                x = augment(x, step)  # (B, 28, 28), new random changes for every step
            loss, num_classes = (graph or _optimizer_step)(model, optimizer, x, labels[idx], amp, scaler, grad_clip())
            step, batches, since_log, samples = step + 1, batches + 1, since_log + 1, samples + len(idx)
            total += (value := loss.detach().float())
            running += value
            if since_log >= log_interval:
                mean = (running / since_log).item()  # the only host sync in the loop
                now = time.perf_counter()
                stuck = isinstance(scaler, LossScaler) and scaler.stuck_message()
                if not math.isfinite(mean) or stuck:
                    return EpochResult(step, batch_offset + batches, mean, False, diverged=True,
                                       reason=stuck or NOT_FINITE)
                exploded = watch.observe(mean, num_classes)
                if on_log is not None:
                    on_log(LogPoint(step, batch_offset + batches, mean, samples / max(now - last_time, 1e-9),
                                    optimizer.param_groups[0]["lr"], exploding=watch.streak > 0))
                if exploded:
                    return EpochResult(step, batch_offset + batches, mean, False, diverged=True, reason=exploded)
                running.zero_()
                since_log = samples = 0
                last_time = now
    mean = _mean(total, batches)
    if not math.isfinite(mean):
        return EpochResult(step, batch_offset + batches, mean, False, diverged=True, reason=NOT_FINITE)
    return EpochResult(step, batch_offset + batches, mean, True)


def _optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, amp: str,
                    scaler: torch.amp.GradScaler | None, clip: float) -> tuple[torch.Tensor, int]:
    """Forward, backward, clip, step on one batch; returns the loss (on the device) and the class count."""
    with autocast(x.device, amp):
        logits = model(x)  # (B, C)
    loss = F.cross_entropy(logits.float(), y)  # in fp32 whatever the model ran in
    optimizer.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    if clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)  # skipped when the scaled gradients overflowed; the scale then drops
        scaler.update()
    return loss, logits.shape[-1]


def graphed_step(model: nn.Module, optimizer: torch.optim.Optimizer, amp: str, device: torch.device,
                 enabled: bool = True) -> GraphedStep:
    """The training step for train_one_epoch's `graph`: from a CUDA graph where it can be (cuda_graph.py)."""
    return GraphedStep.for_run(_optimizer_step, model, optimizer, amp, torch.device(device), enabled)


def _mean(total: torch.Tensor, n: int) -> float:
    return (total / n).item() if n else float("nan")


def _on_threads(fn: Callable[[list[int]], list[torch.Tensor]], chunks: list[list[int]]) -> list[list[torch.Tensor]]:
    """fn(chunk) for every chunk at once, each on a thread of its own with one torch intra-op thread.

    Plain threads, not a pool: a pool may hand two chunks to one worker that finished early."""
    results: list = [None] * len(chunks)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        torch.set_num_threads(1)
        try:
            results[k] = fn(chunks[k])
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller below
            errors.append(exc)

    caller_threads = torch.get_num_threads()
    workers = [threading.Thread(target=run, args=(k,), name=f"evaluate-{k}", daemon=True) for k in range(len(chunks))]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        # set_num_threads also sets the default that threads started later begin with (Streamlit runs each
        # rerun in a new thread): put the caller's back, or every later thread would run on one core
        torch.set_num_threads(caller_threads)
    if errors:
        raise errors[0]
    return results


PER_THREAD_MAX_BATCH = 256  # evaluate: above this a batch's steps are worth sharing between threads (bench scaling)
CUDA_EVAL_BATCH = 4096  # on a GPU a split in few large batches: each batch is 56 sequential small launches per layer


def eval_batch_size_for(device: torch.device, configured: int) -> int:
    """The evaluation batch size on `device`: the configured one on a CPU (docs/decisions/004), at least
    CUDA_EVAL_BATCH on a CUDA GPU, where a batch costs the same launches whatever its size."""
    return max(configured, CUDA_EVAL_BATCH) if torch.device(device).type == "cuda" else configured


def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, *, batch_size: int = 250,
             amp: str = "off", num_classes: int | None = None, threads: int | None = None) -> EvalResult:
    """Loss, accuracy and predictions over a whole split, in eval mode with no autograd.

    On the CPU, with `threads` (default: torch's intra-op thread count) above one, small batches run side
    by side on that many threads, one intra-op thread each. One batch spread over two threads makes
    both meet 56 times per layer (28 small steps, two directions); a batch per thread never waits, so
    fp32 and bf16 autocast both get faster (docs/decisions/004-eval-batch-per-thread.md); the predictions
    match the one-batch-at-a-time path. Large batches (their steps are big enough to share) and splits of
    only a few batches (cores would idle) keep one batch at a time.
    """
    device = images.device
    starts = list(range(0, len(images), batch_size))
    n_threads = (threads or torch.get_num_threads()) if device.type == "cpu" else 1
    if batch_size > PER_THREAD_MAX_BATCH or len(starts) < 2 * n_threads:
        n_threads = 1

    def forward(chunk: list[int]) -> list[torch.Tensor]:
        # inference and autocast state are per thread: entered here, in the thread that runs the batches
        with torch.inference_mode(), autocast(device, amp):
            return [model(to_input(images[i:i + batch_size])).float() for i in chunk]  # (B, C) each

    with mode(model, False):
        if n_threads == 1:
            outputs = forward(starts)
        else:
            chunks = [starts[k::n_threads] for k in range(n_threads)]  # round robin: at most one batch apart
            parts = _on_threads(forward, chunks)
            outputs = [parts[j % n_threads][j // n_threads] for j in range(len(starts))]  # back in order
    n = len(images)
    k = num_classes or (outputs[0].shape[1] if outputs else 10)
    if not n:
        return EvalResult(loss=float("nan"), accuracy=float("nan"), predictions=torch.zeros(0, dtype=torch.long),
                          probabilities=torch.zeros(0, k), per_class=[float("nan")] * k)
    with torch.inference_mode():
        logits = torch.cat(outputs)
        loss = F.cross_entropy(logits, labels, reduction="mean")
        prob = logits.softmax(dim=1)
        pred = prob.argmax(dim=1).cpu()
        prob = prob.cpu()
    truth = labels.cpu()
    correct = pred == truth
    per_class = [float(correct[truth == c].float().mean()) if (truth == c).any() else float("nan") for c in range(k)]
    return EvalResult(loss=loss.item(), accuracy=float(correct.float().mean()), predictions=pred, probabilities=prob,
                      per_class=per_class)


def weights_finite(model: nn.Module) -> bool:
    """True when no parameter holds inf or NaN (one host sync)."""
    return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())


def confusion_matrix(truth: torch.Tensor, pred: torch.Tensor, num_classes: int) -> list[list[int]]:
    """counts[true][predicted]."""
    flat = truth.long() * num_classes + pred.long()
    counts = torch.bincount(flat, minlength=num_classes * num_classes)
    return counts.view(num_classes, num_classes).tolist()


@dataclass
class FitHooks:
    """How `fit` talks to the outside (run directory, live controls, progress bar)."""

    before_step: Callable[[int], bool] | None = None  # False stops training
    on_log: Callable[[int, LogPoint], None] | None = None  # (epoch, point)
    on_epoch_end: Callable[[int, EpochResult, EvalResult], None] | None = None  # (epoch, train, val)
    epochs: Callable[[], int] | None = None  # total epochs, may change live
    grad_clip: Callable[[], float] | None = None
    augment: Callable[[torch.Tensor, int], torch.Tensor] | None = None  # (x, step) -> x, training batches only
    probe: Callable[[int, int, int], None] | None = None  # (step, epoch, batch) before a step: a measurement


@dataclass
class FitResult:
    state: str  # finished | stopped | diverged
    epoch: int  # completed epochs
    step: int
    batch_in_epoch: int  # batches done in the unfinished epoch (0 unless stopped mid-epoch)
    last_val: EvalResult | None = None
    reason: str = ""  # why it diverged, in words


def fit(model: nn.Module, optimizer: torch.optim.Optimizer, train_x: torch.Tensor, train_y: torch.Tensor,
        val_x: torch.Tensor, val_y: torch.Tensor, *, epochs: int, batch_size: int, seed: int,
        log_interval: int = 10, eval_batch_size: int = 250, amp: str = "off", start_epoch: int = 0,
        start_batch: int = 0, step: int = 0, hooks: FitHooks | None = None,
        scaler: torch.amp.GradScaler | None = None, cuda_graphs: bool = False) -> FitResult:
    """Train for `epochs` epochs (from `start_epoch`/`start_batch` when resuming), validating after each.

    `hooks.augment` changes training batches only: validation here (and the test set in the worker) goes
    through `evaluate`, which never augments. `scaler`: fp16 loss scaling made by the caller (who saves and
    restores it with the checkpoints); made here when amp is fp16 and none is given. `cuda_graphs`: on a CUDA
    device, replay the training step from a CUDA graph where it can (cuda_graph.py); off until a GPU check has
    shown the graph trains the same weights as the eager step (benchmarks/README.md, "GPU")."""
    hooks = hooks or FitHooks()
    total_epochs = hooks.epochs or (lambda: epochs)
    epoch, batch0, last_val = start_epoch, start_batch, None
    scaler = scaler or grad_scaler(train_x.device, amp)  # one per run: its scale carries over between epochs
    watch = ExplosionWatch()  # one per run: a streak of exploded logs may cross an epoch boundary
    graph = graphed_step(model, optimizer, amp, train_x.device, cuda_graphs)
    while epoch < total_epochs():
        order = epoch_order(len(train_x), seed, epoch).to(train_x.device)  # replayable for resume
        on_log = (lambda p, e=epoch: hooks.on_log(e, p)) if hooks.on_log else None
        probe = (lambda s, b, e=epoch: hooks.probe(s, e, b)) if hooks.probe else (lambda s, b: None)
        result = train_one_epoch(model, optimizer, train_x, train_y, batches(order, batch_size, batch0),
                                 step=step, batch_offset=batch0, grad_clip=hooks.grad_clip or (lambda: 0.0),
                                 log_interval=log_interval, on_log=on_log, before_step=hooks.before_step, amp=amp,
                                 scaler=scaler, augment=hooks.augment, watch=watch, graph=graph, probe=probe)
        step = result.step
        if result.diverged:
            return FitResult("diverged", epoch, step, result.batches_done, last_val, result.reason)
        if result.stopped:
            return FitResult("stopped", epoch, step, result.batches_done, last_val)
        last_val = evaluate(model, val_x, val_y, batch_size=eval_batch_size, amp=VALIDATION_AMP)
        # Inf weights can still give a finite loss (saturated gates): check both before anything is saved.
        if (len(val_x) and not math.isfinite(last_val.loss)) or not weights_finite(model):
            return FitResult("diverged", epoch, step, result.batches_done, last_val, NOT_FINITE)
        num_classes = last_val.probabilities.shape[1]
        if len(val_x) and watch.above(last_val.loss, num_classes):  # exploded late in the epoch: do not save it
            return FitResult("diverged", epoch, step, result.batches_done, last_val,
                             f"the validation loss {last_val.loss:.4g} is above {watch.limit(num_classes):.1f} "
                             f"({watch.factor:g}x the loss of guessing at random)")
        epoch, batch0 = epoch + 1, 0
        if hooks.on_epoch_end:
            hooks.on_epoch_end(epoch, result, last_val)
    return FitResult("finished", epoch, step, 0, last_val)
