"""The checks of `make bench-gpu` that train: crash, dtype, speed, graphs, amp, cells, batch, accuracy (rows: their
docstrings)."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

import torch

from benchmarks.harness import blog_baseline as blog
from benchmarks.harness.rows import alternate
from benchmarks.harness.sides import BlogTrainer, EngineTrainer
from brnn_core.autocast_probe import lstm_autocast_dtype
from brnn_core.config import TrainConfig
from brnn_core.devices import cpu_has_bf16, resolve_amp
from brnn_core.model import CELLS, ModelConfig, RecurrentClassifier, network_name
from brnn_core.runs.rundir import create_run, new_run_config
from brnn_core.training.engine import evaluate, make_optimizer, train_one_epoch
from brnn_core.training.worker import train_run_dir

if TYPE_CHECKING:
    from benchmarks.cuda_checks_bench import Bench

CUDNN_MESSAGE = "cudnn RNN backward can only be called in training mode"


# ------------------------------------------------------------------ crash
def blog_sequence_without_fix(device, x, y) -> str:
    """The blog's loop as it shipped: train, evaluate (model.eval(), never undone), train again."""
    model, criterion = blog.make_model(device)
    optimizer = blog.make_optimizer(model)
    loader = blog.make_loader(x[:1000], y[:1000])
    test_loader = blog.make_loader(x[1000:1200], y[1000:1200], shuffle=False)

    def one_step() -> None:
        images, labels = next(iter(loader))
        loss = criterion(model(images.view(-1, 28, 28).to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    one_step()  # epoch 1 (a new nn.Module starts in training mode)
    blog.evaluate(model, test_loader, criterion, device)  # validation: model.eval()
    try:
        one_step()  # epoch 2, still in eval mode
        return "no error"
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0]


def engine_sequence(device, x, y) -> bool:
    """brnn_core's engine through the same sequence, with an explicit model.eval() in between too."""
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig()).to(device)
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    xs, ys = x[:2000].to(device), y[:2000].to(device)
    order = lambda: torch.randperm(len(xs), device=device).split(100)  # noqa: E731
    first = train_one_epoch(model, opt, xs, ys, order())
    evaluate(model, xs, ys)
    model.eval()  # a caller that leaves the model in eval mode cannot break the next epoch
    second = train_one_epoch(model, opt, xs, ys, order(), step=first.step)
    return first.completed and second.completed and math.isfinite(second.loss)


def check_crash(b: Bench) -> None:
    x, y = b.train_data()
    found = blog_sequence_without_fix(b.device, x, y)
    expected = b.device.type == "cuda"
    b.add("crash", "blog loop without its fix: train, eval(), train", "raised", float(CUDNN_MESSAGE in found), "",
          target="cuDNN error" if expected else "", met=(CUDNN_MESSAGE in found) if expected else None,
          note=found if expected else f"{found} (CPU LSTMs have no cuDNN rule: only a GPU can show it)")
    ok = engine_sequence(b.device, x, y)
    b.add("crash", "brnn_core engine: train, evaluate, eval(), train", "survived", float(ok), "", target="runs",
          met=ok, note="model.mode() is the one place train/eval is switched")


# ------------------------------------------------------------------ dtype
def check_dtype(b: Bench) -> None:
    """The dtype the BiLSTM's nn.LSTM really ran in under each autocast precision (cuDNN may turn bf16 into fp16)."""
    model = RecurrentClassifier(ModelConfig()).to(b.device)
    wanted = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if b.device.type != "cuda":
        wanted = {"bf16": torch.bfloat16} if cpu_has_bf16() else {}
    for name, dtype in wanted.items():
        ran = lstm_autocast_dtype(b.device, dtype, model)
        b.add("dtype", f"nn.LSTM output under autocast {name}", "as asked", float(ran == dtype), "",
              target=str(dtype).removeprefix("torch."), met=ran == dtype, note=f"ran in {ran}")


# ------------------------------------------------------------------ speed
def default_amp(device: torch.device) -> str:
    """The precision a run at the defaults trains in on `device` (amp=auto as the device resolves it)."""
    return resolve_amp(TrainConfig().amp, device)


def check_speed(b: Bench) -> None:
    """The engine in fp32 and at the defaults (amp auto) against the blog loop; what reading the loss costs."""
    x, y = b.train_data()
    engine, blog_side = EngineTrainer(x, y, b.device), BlogTrainer(x, y, b.device)
    amp = default_amp(b.device)
    defaults = EngineTrainer(x, y, b.device, amp=amp)
    engine_steps, blog_steps = (20, 5) if b.quick else (400, 100)
    # the same step with the loss read back once per measurement: what the read every 10 steps costs on this GPU
    unread = EngineTrainer(x, y, b.device, log_interval=engine_steps)
    for side in (engine, unread, defaults):
        side.run(10 if b.quick else 50)  # warm-up: cuDNN autotuning, allocator
    blog_side.run(5 if b.quick else 20)
    res = alternate({"engine": lambda: engine.samples_per_s(engine_steps),
                     "unread": lambda: unread.samples_per_s(engine_steps),
                     "defaults": lambda: defaults.samples_per_s(engine_steps),
                     "blog": lambda: blog_side.samples_per_s(blog_steps)}, 2 if b.quick else 3, lambda m: None)
    e, g, d = (statistics.median(res[k]) for k in ("engine", "blog", "defaults"))
    b.add("speed", f"engine at the defaults (amp auto = {amp}) / blog", "ratio", d / g, "x",
          values=[a / c for a, c in zip(res["defaults"], res["blog"], strict=True)], target=">= 1.5", met=d / g >= 1.5,
          note=f"{d:,.0f} samples/s (docs/decisions/022-amp-auto-default.md)")
    b.add("speed", "engine, loss read every 10 steps / read once per measurement", "ratio",
          e / statistics.median(res["unread"]), "x", note="below 1: the host sync at each log costs that share")
    b.add("speed", "brnn_core engine (fp32, loss read every 10 steps)", "throughput", e, "samples/s",
          values=res["engine"], note=f"{engine_steps} steps per measurement, batch 100")
    b.add("speed", "blog loop (DataLoader of PIL images, loss.item() per step)", "throughput", g, "samples/s",
          values=res["blog"], note=f"{blog_steps} steps per measurement")
    b.add("speed", "engine / blog", "ratio", e / g, "x", values=[a / c for a, c in zip(res["engine"], res["blog"],
                                                                                     strict=True)],
          target=">= 3", met=e / g >= 3)


# ------------------------------------------------------------------ CUDA graphs
def check_graphs(b: Bench) -> None:
    """The defaults with the step from a CUDA graph (what fit does on a GPU) and eagerly, against the blog's loop,
    fp32 and bf16; each side's peak GPU memory; and the weights after the same steps, graph against eager."""
    x, y = b.train_data()
    steps, size = (4, {"hidden_size": 16}) if b.quick else (300, {})
    modes = [m for m in ("off", "bf16") if m == "off" or b.device.type == "cuda" or cpu_has_bf16()]
    sides = {"blog": BlogTrainer(x, y, b.device)}
    for m in modes:
        sides[f"{m} graph"] = EngineTrainer(x, y, b.device, amp=m, graphs=True, **size)
        sides[f"{m} eager"] = EngineTrainer(x, y, b.device, amp=m, **size)
    peaks = {name: peak_memory(b.device, lambda t=t: t.run(4 if b.quick else 50)) for name, t in sides.items()}
    res = alternate({n: (lambda t=t, k=steps // (4 if n == "blog" else 1): t.samples_per_s(k))
                     for n, t in sides.items()}, 2 if b.quick else 3, lambda m: None)
    blog_rate = statistics.median(res["blog"])
    b.add("graphs", "blog loop (fp32)", "throughput", blog_rate, "samples/s", values=res["blog"],
          note=f"peak {peaks['blog']:.0f} MiB" if b.device.type == "cuda" else "")
    for name in sides:
        if name == "blog":
            continue
        t, rate = sides[name], statistics.median(res[name])
        how = (t.graph.problem or f"replayed {t.graph.replays} steps") if t.graph else "eager"
        b.add("graphs", f"engine amp {name}", "throughput", rate, "samples/s", values=res[name], note=how)
        b.add("graphs", f"engine amp {name} / blog", "ratio", rate / blog_rate, "x",
              target=">= 5" if name.endswith("graph") and b.device.type == "cuda" else "",
              met=rate / blog_rate >= 5 if name.endswith("graph") and b.device.type == "cuda" else None)
        if b.device.type == "cuda":
            b.add("graphs", f"engine amp {name} peak memory", "memory", peaks[name], "MiB",
                  note="torch.cuda.max_memory_allocated")
    diff, note = graph_vs_eager(b, x, y, 6 if b.quick else 100, size)
    b.add("graphs", "weights after the same steps: graph vs eager", "max |diff|", diff, "",
          target="0 off CUDA, small on it", met=diff == 0 if b.device.type != "cuda" else diff < 1e-2, note=note)


def peak_memory(device: torch.device, fn) -> float:
    """MiB of GPU memory allocated at most while fn() runs (0 off CUDA)."""
    if device.type != "cuda":
        fn()
        return 0.0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) / 2**20


def graph_vs_eager(b: Bench, x, y, steps: int, size: dict) -> tuple[float, str]:
    """Largest weight difference after `steps` steps of the same seed and batches, graph against eager."""
    graphed, eager = EngineTrainer(x, y, b.device, graphs=True, **size), EngineTrainer(x, y, b.device, **size)
    graphed.run(steps)
    eager.run(steps)
    diff = max(float((p - q).detach().abs().max()) for p, q in zip(graphed.model.parameters(), eager.model.parameters(),
                                                         strict=True))
    return diff, graphed.graph.problem or f"{graphed.graph.replays} of {steps} steps replayed"


# ------------------------------------------------------------------ cells
def check_cells(b: Bench) -> None:
    """Each cell, two-way and one-way, at the defaults (amp auto) against the blog loop (a two-way LSTM in fp32):
    what each entry of `compare`'s matrix costs a step on this device."""
    x, y = b.train_data()
    amp = default_amp(b.device)
    steps, blog_steps, size = (3, 2, {"hidden_size": 16}) if b.quick else (200, 50, {})
    sides = {"blog": BlogTrainer(x, y, b.device)}
    for cell in CELLS:
        for two_way in (True, False):
            network = {"cell": cell, "bidirectional": two_way}
            sides[network_name(TrainConfig(**network))] = EngineTrainer(x, y, b.device, amp=amp, network=network,
                                                                        **size)
    for side in sides.values():
        side.run(2 if b.quick else 20)  # warm-up: cuDNN picks each cell's kernels
    res = alternate({n: (lambda t=t, k=blog_steps if n == "blog" else steps: t.samples_per_s(k))
                     for n, t in sides.items()}, 2 if b.quick else 3, lambda m: None)
    blog_rate = statistics.median(res["blog"])
    b.add("cells", "blog loop (two-way LSTM, fp32)", "throughput", blog_rate, "samples/s", values=res["blog"])
    for name in list(sides)[1:]:
        rate = statistics.median(res[name])
        b.add("cells", f"engine, {name} / blog", "ratio", rate / blog_rate, "x",
              values=[a / c for a, c in zip(res[name], res["blog"], strict=True)],
              note=f"{rate:,.0f} samples/s, amp {amp}")


# ------------------------------------------------------------------ batch
def check_batch(b: Bench) -> None:
    """The defaults at the blog's batch 100 against batch 96: cuDNN's persistent RNN kernels want a batch that is a
    multiple of 8; samples/s of each, in fp32 and at the default amp."""
    x, y = b.train_data()
    amp = default_amp(b.device)
    steps, size = (3, {"hidden_size": 16}) if b.quick else (300, {})
    sides = {(m, n): EngineTrainer(x, y, b.device, amp=m, batch_size=n, **size)
             for m in dict.fromkeys(("off", amp)) for n in (100, 96)}
    for side in sides.values():
        side.run(2 if b.quick else 30)
    res = alternate({k: (lambda t=t: t.samples_per_s(steps)) for k, t in sides.items()}, 2 if b.quick else 3,
                    lambda m: None)
    for m in dict.fromkeys(("off", amp)):
        for n in (100, 96):
            b.add("batch", f"engine, batch {n}, amp {m}", "throughput", statistics.median(res[(m, n)]), "samples/s",
                  values=res[(m, n)])
        b.add("batch", f"batch 96 / batch 100, amp {m}", "ratio",
              statistics.median(res[(m, 96)]) / statistics.median(res[(m, 100)]), "x",
              values=[a / c for a, c in zip(res[(m, 96)], res[(m, 100)], strict=True)],
              note="above 1: a multiple of 8 pays (samples/s, so the smaller batch is not favoured)")


# ------------------------------------------------------------------ accuracy (and amp)
def brnn_run(b: Bench, seed: int, amp: str = TrainConfig().amp) -> dict:
    """A real run through training.worker.train_run_dir; its test accuracy, samples/s and fp16 skipped steps."""
    cfg = TrainConfig(dataset=b.dataset, epochs=b.epochs, device=str(b.device), seed=seed, amp=amp,
                      **({"hidden_size": 32} if b.quick else {})).validate()
    run = create_run(b.tmp / "runs", new_run_config(cfg, b.data_dir))
    state = train_run_dir(run, data_dir=b.data_dir)
    status = run.status()
    if state != "finished":
        raise RuntimeError(f"brnn_core run ended {state}: {status.get('message')}")
    metrics = run.metrics()
    rates = metrics[metrics["split"] == "train"]["samples_per_s"].iloc[1:]
    return {"test_acc": status["test_acc"], "samples_per_s": float(rates.median()),
            "skipped": status.get("skipped_steps"), "amp": run.config().get("amp")}


def blog_accuracy(b: Bench, seed: int) -> float:
    """The blog script's 2 epochs on the full training set (it has no validation split), test accuracy."""
    torch.manual_seed(seed)
    model, criterion = blog.make_model(b.device, hidden_size=32 if b.quick else 128)
    optimizer = blog.make_optimizer(model)
    loader = blog.make_loader(b.ds.train_x, b.ds.train_y, generator=torch.Generator().manual_seed(seed))
    test_loader = blog.make_loader(b.ds.test_x, b.ds.test_y, shuffle=False)
    for epoch in range(b.epochs):
        blog.train_steps(model, loader, criterion, optimizer, b.device, epoch=epoch, num_epochs=b.epochs,
                         log=lambda m: None)
    return blog.evaluate(model, test_loader, criterion, b.device)[1]


def check_accuracy(b: Bench) -> None:
    if b.ds is None:
        b.add("accuracy", "test accuracy after 2 epochs", "accuracy", None, "%", note=b.data_note)
        return
    seeds = range(b.args.seeds)
    runs = [brnn_run(b, s) for s in seeds]
    ours = [100 * r["test_acc"] for r in runs]
    theirs = [100 * blog_accuracy(b, s) for s in seeds]
    what = f"{b.epochs} epoch(s) of {b.dataset}, seeds {list(seeds)}"
    b.add("accuracy", "brnn_core run (defaults: bidir head, 10% held out)", "accuracy", statistics.mean(ours), "%",
          values=ours, note=f"{what}; amp auto = {runs[0]['amp']}")
    b.add("accuracy", "blog loop (out[:, -1, :], the whole training set)", "accuracy", statistics.mean(theirs), "%",
          values=theirs, note=what)
    diff = statistics.mean(ours) - statistics.mean(theirs)
    b.add("accuracy", "brnn_core - blog", "difference", diff, "points", target=">= -0.5", met=diff >= -0.5,
          note="mean over the seeds; brnn_core trains on 10% fewer images (validation split)")


def amp_modes(b: Bench) -> list[str]:
    if b.device.type == "cuda":
        return ["off", "bf16", "fp16"] if torch.cuda.is_bf16_supported() else ["off", "fp16"]
    return ["off", "bf16"] if cpu_has_bf16() else ["off"]  # fp16 trains on CUDA only


def check_amp(b: Bench) -> None:
    x, y = b.train_data()
    modes = amp_modes(b)
    trainers = {m: EngineTrainer(x, y, b.device, amp=m) for m in modes}
    steps = 10 if b.quick else 300
    for t in trainers.values():
        t.run(5 if b.quick else 50)
    res = alternate({m: (lambda t=t: t.samples_per_s(steps)) for m, t in trainers.items()}, 2 if b.quick else 3,
                    lambda m: None)
    for m in modes:
        b.add("amp", f"engine, amp {m if m != 'off' else 'off (fp32)'}", "throughput",
              statistics.median(res[m]), "samples/s", values=res[m],
              note="fp16 with loss scaling (LossScaler)" if m == "fp16" else "")
    if b.ds is None:
        b.add("amp", "test accuracy per precision", "accuracy", None, "%", note=b.data_note)
        return
    for m in modes:
        info = brnn_run(b, 0, amp=m)
        note = f"{b.epochs} epoch(s), seed 0" + (f"; {info['skipped']} steps skipped by fp16 overflow"
                                                 if m == "fp16" else "")
        b.add("amp", f"brnn_core run, amp {m}", "accuracy", 100 * info["test_acc"], "%", note=note)
