"""The model, the training/evaluation loops, and real short training runs on CPU.

Includes the regression test for the blog script's bug: it validated with model.eval() and never
called model.train() again, so epoch 2 ran backward in eval mode and cuDNN's LSTM refused
("cudnn RNN backward can only be called in training mode"). CPU LSTMs do not refuse, so the
test below gives the LSTM cuDNN's rule and then runs the blog's sequence through the engine.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch
import torch.nn.functional as F
from helpers import STEPS_PER_EPOCH, copy_run, torch_threads, train_run
from torch import nn

from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.data.batching import to_input
from brnn_core.devices import resolve_amp
from brnn_core.model import ModelConfig, RecurrentClassifier, mode
from brnn_core.training import recorder
from brnn_core.training.engine import (
    confusion_matrix,
    evaluate,
    fit,
    grad_scaler,
    make_optimizer,
    train_one_epoch,
    weights_finite,
)
from brnn_core.training.worker import train_run_dir

CUDNN_MESSAGE = "cudnn RNN backward can only be called in training mode"


def small_model(seed: int = 0, **kw) -> RecurrentClassifier:
    torch.manual_seed(seed)
    return RecurrentClassifier(ModelConfig(**{"hidden_size": 8, "num_layers": 2, **kw}))


# ------------------------------------------------------------------ model
@pytest.mark.parametrize("head", ["bidir", "last"])
def test_output_shapes(head):
    model = small_model(head=head, num_classes=7)
    out = model(torch.rand(5, 28, 28))  # (B, T, input) rows of pixels
    assert out.shape == (5, 7) and out.dtype == torch.float32
    assert model(torch.rand(1, 28, 28)).shape == (1, 7)


def _fc_input(model: RecurrentClassifier, x: torch.Tensor) -> torch.Tensor:
    seen = []
    handle = model.fc.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    model(x)
    handle.remove()
    return seen[0]


def test_bidir_head_reads_both_full_passes():
    model = small_model(head="bidir")
    x = torch.rand(4, 28, 28)
    _, (h_n, _) = model.lstm(x)  # (layers * 2, B, H): the last layer's forward and backward final states
    feat = _fc_input(model, x)
    assert torch.allclose(feat, torch.cat([h_n[-2], h_n[-1]], dim=1), atol=1e-6)


def test_last_head_backward_half_has_seen_only_the_last_row():
    model = small_model(head="last", num_layers=1)  # with more layers it sees the last row's layer-1 output
    x = torch.rand(3, 28, 28)
    y = x.clone()
    y[:, :-1] = torch.rand(3, 27, 28)  # change every row but the last
    fx, fy = _fc_input(model, x), _fc_input(model, y)
    h = model.cfg.hidden_size
    assert torch.allclose(fx[:, h:], fy[:, h:], atol=1e-6)  # backward direction: one step, the last row
    assert not torch.allclose(fx[:, :h], fy[:, :h])  # forward direction: the whole image


def test_make_optimizer():
    params = list(small_model().parameters())
    assert isinstance(make_optimizer(params, "adam", 0.01), torch.optim.Adam)
    assert isinstance(make_optimizer(params, "adamw", 0.01, 0.1), torch.optim.AdamW)
    sgd = make_optimizer(params, "sgd", 0.1, momentum=0.5)
    assert sgd.param_groups[0]["momentum"] == 0.5 and sgd.param_groups[0]["lr"] == 0.1
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        make_optimizer(params, "rmsprop", 0.01)


def test_confusion_matrix():
    truth = torch.tensor([0, 0, 1, 2, 2, 2])
    pred = torch.tensor([0, 1, 1, 2, 0, 2])
    assert confusion_matrix(truth, pred, 3) == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]


# ------------------------------------------------------------------ the blog's bug
class _BackwardNeedsTrainingMode(torch.autograd.Function):
    """Identity whose backward refuses if the RNN was in eval mode at forward time, as cuDNN's does.

    Like PyTorch on a GPU, the cuDNN kernel is used only while `torch.backends.cudnn.enabled`: a forward
    pass with cuDNN switched off runs the native LSTM, whose backward works in either mode."""

    @staticmethod
    def forward(ctx, x, training):
        ctx.refuse = not training and torch.backends.cudnn.enabled
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if ctx.refuse:
            raise RuntimeError(CUDNN_MESSAGE)
        return grad, None


class CudnnLikeLSTM(nn.Module):
    """Wraps an nn.LSTM so that, on CPU, backward through it follows cuDNN's training-mode rule."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.lstm = lstm

    def forward(self, x):
        out, state = self.lstm(x)
        return _BackwardNeedsTrainingMode.apply(out, self.training), state


def cudnn_like_model() -> RecurrentClassifier:
    model = small_model()
    model.lstm = CudnnLikeLSTM(model.lstm)
    return model


def _tiny_split(sample, n=200):
    return sample.train_x[:n], sample.train_y[:n]


def test_harness_reproduces_the_blog_crash(sample):
    """Sanity check of the harness: the blog's own sequence crashes exactly as on the GPU."""
    model = cudnn_like_model()
    x, y = _tiny_split(sample, 50)
    model.eval()  # the blog's validation, with no model.train() afterwards
    loss = F.cross_entropy(model(to_input(x)), y)
    with pytest.raises(RuntimeError, match=CUDNN_MESSAGE):
        loss.backward()


def test_engine_trains_after_evaluate_as_the_blog_could_not(sample):
    """Regression test: fails if engine.mode() stops calling model.train(training) (or if
    train_one_epoch stops entering training mode), because backward would then run in eval mode."""
    model = cudnn_like_model()
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    x, y = _tiny_split(sample)
    batches = lambda: list(torch.arange(len(x)).split(50))  # noqa: E731
    model.eval()  # as the blog left it after its first validation
    first = train_one_epoch(model, opt, x, y, batches(), log_interval=2)
    assert first.completed and first.step == 4 and math.isfinite(first.loss)
    val = evaluate(model, x, y, batch_size=64)
    assert 0.0 <= val.accuracy <= 1.0 and len(val.predictions) == len(x)
    second = train_one_epoch(model, opt, x, y, batches(), step=first.step, log_interval=2)  # the blog's epoch 2
    assert second.completed and second.step == 8 and math.isfinite(second.loss)
    assert not model.training  # the caller's eval mode is given back

    # fit() interleaves the same way: train, validate, train, validate.
    result = fit(cudnn_like_model(), make_optimizer(model.parameters(), "adam", 0.01), x, y, x, y,
                 epochs=2, batch_size=50, seed=0, log_interval=2)
    assert result.state == "finished" and result.epoch == 2 and result.step == 8


@pytest.mark.slow
def test_fp16_training_scales_the_loss_and_clips_the_true_gradients(sample, monkeypatch):
    """fp16 autocast runs here on the CPU: the GradScaler code path is the one CUDA runs."""
    model = small_model()
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    x, y = _tiny_split(sample, 400)
    scaler = grad_scaler(torch.device("cpu"), "fp16")
    assert grad_scaler(torch.device("cpu"), "bf16") is None and grad_scaler(torch.device("cpu"), "off") is None
    norms: list[float] = []
    clip_grad_norm = nn.utils.clip_grad_norm_

    def recording_clip(params, max_norm):
        total = clip_grad_norm(params, max_norm)
        norms.append(float(total))
        return total

    monkeypatch.setattr(nn.utils, "clip_grad_norm_", recording_clip)
    before = [p.detach().clone() for p in model.parameters()]
    # oneDNN has no fp16 LSTM on most CPUs; ATen's own has (allow_tf32=None: leave that setting alone)
    with torch.backends.mkldnn.flags(enabled=False, allow_tf32=None):
        first = train_one_epoch(model, opt, x, y, torch.arange(len(x)).split(50), grad_clip=lambda: 5.0,
                                amp="fp16", scaler=scaler, log_interval=4)
        second = train_one_epoch(model, opt, x, y, torch.arange(len(x)).split(50), step=first.step,
                                 grad_clip=lambda: 5.0, amp="fp16", scaler=scaler, log_interval=4)
    assert first.completed and second.completed and second.step == 16
    assert second.loss < first.loss  # it learns
    state = scaler.state_dict()  # used every step: steps since the last overflow counted, or the scale backed off
    assert state["_growth_tracker"] > 0 or state["scale"] < 65536.0, state
    # clipping saw unscaled gradients: a scaled norm would be ~scale times larger than any of these
    assert len(norms) == 16 and all(0 < n < 100 for n in norms), norms
    assert weights_finite(model) and any(not torch.equal(a, b) for a, b in zip(before, model.parameters(),
                                                                              strict=True))


def _record_modes(model: nn.Module) -> list[bool]:
    modes: list[bool] = []
    model.register_forward_hook(lambda mod, inp, out: modes.append(mod.training))
    model.lstm.register_forward_hook(lambda mod, inp, out: modes.append(mod.training))
    return modes


@pytest.mark.parametrize("before", [True, False], ids=["was-training", "was-eval"])
def test_evaluate_runs_in_eval_mode_and_restores_the_previous_mode(sample, before):
    model = small_model()
    modes = _record_modes(model)
    x, y = _tiny_split(sample, 120)
    model.train(before)
    result = evaluate(model, x, y, batch_size=50)
    assert modes == [False] * 6  # 3 batches x (model, lstm), none in training mode
    assert model.training is before and model.lstm.training is before
    assert result.probabilities.shape == (120, 10)
    assert torch.allclose(result.probabilities.sum(dim=1), torch.ones(120), atol=1e-5)
    assert result.accuracy == pytest.approx(float((result.predictions == y).float().mean()))


@pytest.mark.parametrize("threads", [2, 3])
def test_evaluate_on_several_threads_matches_one_thread(sample, threads):
    model = small_model()
    model.train()
    modes = _record_modes(model)
    runners: set[str] = set()
    model.register_forward_hook(lambda mod, inp, out: runners.add(threading.current_thread().name))
    x, y = _tiny_split(sample, 380)  # 8 batches of 50, the last one short: uneven round robin
    one = evaluate(model, x, y, batch_size=50, threads=1)
    assert runners == {threading.current_thread().name}
    calls = len(modes)
    runners.clear()
    with torch_threads(2):  # the suite runs on one thread; a caller with two shows whether one leaks
        many = evaluate(model, x, y, batch_size=50, threads=threads)
        assert torch.get_num_threads() == 2
        seen = []  # ... to the caller or to threads started later (Streamlit starts one per rerun)
        later = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        later.start()
        later.join()
        assert seen == [2]
    assert runners == {f"evaluate-{k}" for k in range(threads)}  # one thread per chunk, side by side
    assert modes[calls:] == [False] * 16  # every batch in eval mode, in every thread
    assert model.training
    assert torch.equal(many.predictions, one.predictions)  # same order, same answers
    assert torch.allclose(many.probabilities, one.probabilities, atol=1e-5)
    assert many.loss == pytest.approx(one.loss, rel=1e-5) and many.accuracy == one.accuracy
    assert many.per_class == one.per_class


@pytest.mark.parametrize(("n", "batch_size"), [(600, 300), (150, 50)], ids=["large-batches", "few-batches"])
def test_evaluate_keeps_large_or_few_batches_on_the_calling_thread(sample, n, batch_size):
    model = small_model()
    runners: set[str] = set()
    model.register_forward_hook(lambda mod, inp, out: runners.add(threading.current_thread().name))
    x, y = _tiny_split(sample, n)
    result = evaluate(model, x, y, batch_size=batch_size, threads=2)
    assert runners == {threading.current_thread().name} and len(result.predictions) == n


def test_evaluate_an_empty_split_says_nan_not_zero(sample):
    result = evaluate(small_model(), sample.test_x[:0], sample.test_y[:0], num_classes=10)
    assert math.isnan(result.loss) and math.isnan(result.accuracy)
    assert result.predictions.shape == (0,) and result.probabilities.shape == (0, 10)


@pytest.mark.parametrize("before", [True, False], ids=["was-training", "was-eval"])
def test_train_one_epoch_runs_in_training_mode_and_restores(sample, before):
    model = small_model()
    modes = _record_modes(model)
    x, y = _tiny_split(sample, 100)
    model.train(before)
    train_one_epoch(model, make_optimizer(model.parameters(), "adam", 0.01), x, y, torch.arange(100).split(50))
    assert modes == [True] * 4
    assert model.training is before


def test_mode_restores_even_after_an_exception():
    model = small_model()
    model.train()
    with pytest.raises(KeyError), mode(model, False):
        assert not model.training
        raise KeyError("boom")
    assert model.training


def test_evaluate_per_class_marks_absent_classes(sample):
    keep = sample.test_y < 2  # only zeros and ones
    result = evaluate(small_model(), sample.test_x[keep], sample.test_y[keep], num_classes=10)
    assert len(result.per_class) == 10
    assert all(math.isnan(a) for a in result.per_class[2:])
    assert all(0.0 <= a <= 1.0 for a in result.per_class[:2])


def test_before_step_false_stops_the_epoch(sample):
    model = small_model()
    x, y = _tiny_split(sample, 200)
    result = train_one_epoch(model, make_optimizer(model.parameters(), "adam", 0.01), x, y,
                             torch.arange(200).split(50), before_step=lambda step: step < 2)
    assert result.stopped and not result.completed and (result.step, result.batches_done) == (2, 2)


# ------------------------------------------------------------------ real training on CPU
@pytest.mark.slow
def test_default_config_learns_mnist_sample(runs_dir):
    # Every default (the blog's hidden 128, 2 layers, batch 100, Adam lr 0.01, and this project's recipe) for one
    # epoch: on one thread, as here, seeds 0, 1 and 2 each clear both bars below with points to spare (more epochs
    # only cost the suite time; the accuracy of the defaults' full training is a benchmark: benchmarks/README.md).
    run, state = train_run(runs_dir, epochs=1, seed=0, amp=TrainConfig().amp)  # auto: what this machine makes of it
    assert state == "finished", run.status()
    assert run.config()["amp"] == resolve_amp("auto", torch.device("cpu"))
    status = run.status()
    assert status["test_acc"] >= 0.88, status
    metrics = run.metrics()
    val = metrics[metrics.split == "val"]
    assert val.epoch.tolist() == [1]
    assert val.accuracy.iloc[-1] >= 0.85
    train = metrics[metrics.split == "train"]
    assert train.loss.iloc[-1] < 0.6 * train.loss.iloc[0]  # it learned
    assert train.step.is_monotonic_increasing and status["step"] == STEPS_PER_EPOCH
    assert metrics[metrics.split == "test"].accuracy.iloc[-1] == pytest.approx(status["test_acc"], abs=1e-5)
    best = load_checkpoint(run.best_ckpt)
    assert best.metrics["val_loss"] == pytest.approx(val.loss.min(), rel=1e-4)


REPRO = {"hidden_size": 16, "num_layers": 1, "epochs": 1, "log_interval": 4}


@pytest.mark.slow
def test_same_seed_same_cpu_loss_curve_different_seed_different(runs_dir):
    curves, vals = [], []
    for seed in (5, 5, 6):
        run, state = train_run(runs_dir, seed=seed, **REPRO)
        assert state == "finished"
        m = run.metrics()
        curves.append(m[m.split == "train"].loss.tolist())
        vals.append(run.status()["val_loss"])
    assert len(curves[0]) == STEPS_PER_EPOCH // REPRO["log_interval"]
    assert curves[0] == curves[1] and vals[0] == vals[1]
    assert curves[0] != curves[2] and vals[0] != vals[2]


@pytest.mark.slow
def test_divergence_keeps_the_last_good_checkpoint(finished, tmp_path, monkeypatch):
    """After a sane epoch (a copy of conftest's `finished`) lr goes to 10: the run diverges in a later epoch and the
    checkpoints on disk still hold finite weights (also with a mid-epoch save at every log)."""
    monkeypatch.setattr(recorder, "CHECKPOINT_EVERY_S", 0.0)  # save last.pt at every log point
    run = copy_run(finished, tmp_path / "runs")
    run.send_command("set", field="epochs", value=6)
    run.send_command("set", field="lr", value="10")
    state = train_run_dir(run, data_dir=finished.path.parents[1] / "data", resume=True)
    assert state == "diverged", run.status()
    status = run.status()
    assert "Lower the learning rate (now 10)" in status["message"]
    assert "last.pt and best.pt hold" in status["message"]
    assert any(e["kind"] == "set" and e["message"].startswith("lr 0.01 -> 10 at step") for e in run.events())
    for path in (run.last_ckpt, run.best_ckpt):
        ckpt = load_checkpoint(path)
        assert ckpt.epoch >= 1
        assert all(torch.isfinite(t).all() for t in ckpt.model_state.values()), f"{path.name} holds inf/NaN"
    best = load_checkpoint(run.best_ckpt)
    assert math.isfinite(best.metrics["val_loss"])
