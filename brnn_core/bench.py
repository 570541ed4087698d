"""`python -m brnn_core bench`: the benchmark suite (what each row means: bench/README.md).

Benchmarks (pick with --only):
  train    training samples/s: brnn_core's engine vs a faithful copy of the blog loop
           (brnn_core.blog_baseline), and the engine with a host sync every step
  amp      the engine with mixed precision (bf16; fp16 too on CUDA) vs full precision
  worker   the dashboard's path (jobs.start_worker: subprocess + run directory + control
           polling) vs the bare engine: its overhead in percent; also start-up and peak RSS
  eval     a whole test set through engine.evaluate vs the blog's evaluation loop
  predict  280x280 RGBA canvas -> probabilities with inference.Predictor: median and p95 latency
  scaling  throughput vs batch size, hidden size, threads and eval batch; where a step's time goes
  memory   the worker's peak RSS; on CUDA also torch.cuda.max_memory_allocated

Comparisons are measured alternately (A B A B ...) in one process so that a machine whose load
changes affects both sides alike; each row reports the median and the range over repetitions.
Results are printed as one table and written to OUT/<date>_<device>.{csv,json} and
OUT/latest.{csv,json}.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import __version__
from . import blog_baseline as blog
from .allocator import tune_malloc
from .config import TrainConfig, cpu_threads, device_problem, resolve_device
from .data import Dataset, DatasetError, batches, epoch_order, load_dataset, to_input
from .engine import evaluate, grad_scaler, make_optimizer, train_one_epoch
from .fileio import atomic_write
from .model import BiLSTM, ModelConfig

BENCHES = ("train", "amp", "worker", "eval", "predict", "scaling", "memory")
CSV_FIELDS = ["bench", "case", "metric", "value", "unit", "lo", "hi", "spread_pct", "reps", "target", "met", "note"]
META_IN_CSV = ["date", "device", "device_name", "cpu", "cores", "threads", "torch"]


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

    @classmethod
    def quick(cls) -> Sizes:
        return cls(train_steps=4, warmup_steps=2, reps=2, eval_reps=1, eval_dataset="mnist-sample", worker_reps=1,
                   worker_overrides={"val_fraction": 0.5, "log_interval": 5, "hidden_size": 32}, worker_warmup=False,
                   predict_calls=30,
                   scaling_batches=(32, 256), scaling_hidden=(64, 128), scaling_eval_batches=(100, 500),
                   scaling_eval_images=500, scaling_seconds=0.2, scaling_sweeps=1, breakdown_steps=3)


@dataclass
class Row:
    bench: str
    case: str
    metric: str
    value: float
    unit: str
    lo: float | None = None  # range over repetitions (min, max); for a ratio, of the pairwise ratios
    hi: float | None = None
    reps: int = 1
    target: str = ""  # e.g. ">= 1.1" (a goal to read against, never asserted)
    met: str = ""  # yes / no when there is a target
    note: str = ""

    @property
    def spread(self) -> float | None:
        """(max - min) / |median| in percent: above about 20%, the machine was too busy to trust the row."""
        if self.reps < 2 or self.lo is None or self.hi is None or not self.value or \
                self.metric not in ("throughput", "time", "ratio", "memory"):
            return None  # an overhead near 0 or a latency distribution has no meaningful relative spread
        return 100 * (self.hi - self.lo) / abs(self.value)


# ------------------------------------------------------------------ measuring
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def alternate(cases: dict[str, Callable[[], float]], reps: int, log: Callable[[str], None],
              label: str = "") -> dict[str, list[float]]:
    """Call each case once per round, in turn (A B A B ...), `reps` rounds; values per case."""
    out: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(reps):
        for name, fn in cases.items():
            out[name].append(fn())
            log(f"{label}{name}: {out[name][-1]:,.1f} (round {r + 1}/{reps})")
    return out


def throughput_row(bench: str, case: str, values: list[float], note: str = "", unit: str = "samples/s") -> Row:
    return Row(bench, case, "throughput", median(values), unit, min(values), max(values), len(values), note=note)


def ratio_row(bench: str, case: str, a: list[float], b: list[float], *, target: float | None = None,
              note: str = "") -> Row:
    """median(a) / median(b), with the range of the round-by-round ratios a[i] / b[i]."""
    pairs = [x / y for x, y in zip(a, b, strict=False) if y > 0]
    value = median(a) / median(b) if median(b) > 0 else float("nan")
    row = Row(bench, case, "ratio", value, "x", min(pairs, default=None), max(pairs, default=None), len(pairs),
              note=note)
    if target is not None:
        row.target, row.met = f">= {target:g}", "yes" if value >= target else "no"
    return row


class EngineTrainer:
    """brnn_core's training path: device-resident uint8 data, engine.train_one_epoch."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, device: torch.device, *, hidden_size: int | None = None,
                 batch_size: int | None = None, amp: str = "off", log_interval: int | None = None, seed: int = 0):
        cfg = TrainConfig()
        self.device = device
        self.batch_size = batch_size or cfg.batch_size
        self.amp = amp
        self.log_interval = log_interval or cfg.log_interval
        torch.manual_seed(seed)
        mcfg = ModelConfig(hidden_size=hidden_size or cfg.hidden_size, num_layers=cfg.num_layers, head=cfg.head,
                           dropout=cfg.dropout, num_classes=10)
        self.model = BiLSTM(mcfg).to(device)
        self.optimizer = make_optimizer(self.model.parameters(), cfg.optimizer, cfg.lr, cfg.weight_decay,
                                        cfg.momentum)
        self.x, self.y = x.to(device), y.to(device)
        self.scaler = grad_scaler(device, amp)  # fp16: loss scaling as fit does it, kept across measurements
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
        sync(self.device)
        t0 = time.perf_counter()
        result = train_one_epoch(self.model, self.optimizer, self.x, self.y, self._index_batches(steps),
                                 log_interval=self.log_interval, amp=self.amp, scaler=self.scaler)
        sync(self.device)
        seconds = time.perf_counter() - t0
        if result.diverged:
            raise RuntimeError("the benchmark model diverged; the numbers would be meaningless")
        return result.batches_done * self.batch_size, seconds

    def samples_per_s(self, steps: int) -> float:
        samples, seconds = self.run(steps)
        return samples / seconds


class BlogTrainer:
    """The blog script's training loop (brnn_core.blog_baseline) on the same uint8 images."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, device: torch.device, seed: int = 0):
        cfg = TrainConfig()
        self.device = device
        torch.manual_seed(seed)
        self.model, self.criterion = blog.make_model(device, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers)
        self.optimizer = blog.make_optimizer(self.model, cfg.lr)
        self.loader = blog.make_loader(x, y, batch_size=cfg.batch_size, shuffle=True)

    def run(self, steps: int) -> tuple[int, float]:
        sync(self.device)
        t0 = time.perf_counter()
        done = samples = 0
        while done < steps:  # one call = one of the script's epochs (a fresh DataLoader iterator)
            _, n_steps, n_samples = blog.train_steps(self.model, self.loader, self.criterion, self.optimizer,
                                                     self.device, max_steps=steps - done, log=_quiet)
            done, samples = done + n_steps, samples + n_samples
        sync(self.device)
        return samples, time.perf_counter() - t0

    def samples_per_s(self, steps: int) -> float:
        samples, seconds = self.run(steps)
        return samples / seconds


def _quiet(_: str) -> None:
    pass


class Child:
    """One benchmark side in its own fresh Python process, driven one request at a time over a pipe.

    Every side of a training or evaluation comparison runs in a child of its own, so that each
    gets a fresh process as a real run does: the blog script in a plain one, brnn_core's engine
    with glibc's allocator tuned as the training worker tunes it (brnn_core.allocator), and
    process history (heap state, caches) favours neither side. The parent sends one request at a
    time and waits for the answer, so the sides run strictly one after the other (A B A B ...),
    never at the same time.

    kind: "engine" or "blog" (training steps), "engine-eval" or "blog-eval" (a whole test set).
    spec: EngineTrainer settings (hidden_size, batch_size, log_interval) and eval_dataset.
    """

    def __init__(self, kind: str, device: torch.device, *, tuned: bool, spec: dict | None = None):
        self.kind = kind
        cmd = [sys.executable, "-m", "brnn_core", "bench", "--serve", kind, "--device", str(device),
               "--threads", str(torch.get_num_threads()), "--serve-spec", json.dumps(spec or {})]
        env = {**os.environ, "BRNN_MALLOC_TUNING": "1" if tuned else "0", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=Path(__file__).resolve().parent.parent)
        self.info: dict | None = None
        self.faults: list[float] = []  # page faults per step of each timed training request

    def ready(self) -> Child:
        if self.info is None:
            self.info = self._read()
        return self

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark child {self.kind} ended (exit code {self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"benchmark child {self.kind}: {reply['error']}")
        return reply

    def call(self, op: str, **args) -> dict:
        self.ready()
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def samples_per_s(self, steps: int) -> float:
        reply = self.call("train", steps=steps)
        self.faults.append(reply.get("faults_per_step", 0.0))
        return reply["samples"] / reply["seconds"]

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def children(specs: dict[str, tuple]) -> Iterator[dict[str, Child]]:
    """Start every child at once (they load in parallel), wait until all are ready, close them at the end."""
    started: dict[str, Child] = {}
    try:
        for name, (kind, device, tuned, spec) in specs.items():
            started[name] = Child(kind, device, tuned=tuned, spec=spec)
        for child in started.values():
            child.ready()
        yield started
    finally:
        for child in started.values():
            child.close()


def minor_faults() -> int:
    """Page faults this process has taken so far (0 where `resource` is missing)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def serve(kind: str, device: torch.device, spec: dict) -> int:
    """The child's end of `Child`: one JSON request per stdin line, one JSON reply per stdout line."""
    from .allocator import tune_malloc

    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies may reach the pipe

    def reply(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    tuned = device.type == "cpu" and tune_malloc()  # a no-op unless BRNN_MALLOC_TUNING allows it
    trainer = evaluator = None
    try:
        if kind in ("engine", "blog"):
            ds = load_dataset("mnist-sample", download=False)
            if kind == "engine":
                trainer = EngineTrainer(ds.train_x, ds.train_y, device, hidden_size=spec.get("hidden_size"),
                                        batch_size=spec.get("batch_size"), log_interval=spec.get("log_interval"))
            else:
                trainer = BlogTrainer(ds.train_x, ds.train_y, device)
        elif kind in ("engine-eval", "blog-eval"):
            test = load_dataset(spec.get("eval_dataset") or "mnist-sample", download=False)
            if kind == "engine-eval":
                evaluator = EngineEvaluator(test.test_x, test.test_y, device, amp=spec.get("amp", "off"))
            else:
                evaluator = BlogEvaluator(test.test_x, test.test_y, device)
        else:
            raise ValueError(f"unknown kind {kind!r}")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    reply({"ready": True, "kind": kind, "malloc_tuned": tuned})
    for line in sys.stdin:
        try:
            req = json.loads(line)
            if req["op"] == "train" and trainer is not None:
                faults0 = minor_faults()
                samples, seconds = trainer.run(req["steps"])
                reply({"samples": samples, "seconds": seconds,
                       "faults_per_step": (minor_faults() - faults0) / max(1, req["steps"])})
            elif req["op"] == "eval" and evaluator is not None:
                reply(evaluator.run(warmup=bool(req.get("warmup"))))
            else:
                reply({"error": f"a {kind} child cannot do {req['op']!r}"})
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            reply({"error": f"{type(exc).__name__}: {exc}"})
    return 0


class EngineEvaluator:
    """engine.evaluate over a whole test set on the device, at the default eval batch."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, device: torch.device, amp: str = "off"):
        self.device, self.batch_size, self.amp = device, TrainConfig().eval_batch_size, amp
        torch.manual_seed(0)
        self.model = BiLSTM(ModelConfig()).to(device)
        self.x, self.y = x.to(device), y.to(device)

    def run(self, warmup: bool = False) -> dict:
        n = min(len(self.x), 2 * self.batch_size) if warmup else len(self.x)
        sync(self.device)
        t0 = time.perf_counter()
        result = evaluate(self.model, self.x[:n], self.y[:n], batch_size=self.batch_size, amp=self.amp)
        sync(self.device)
        return {"seconds": time.perf_counter() - t0, "n": n, "accuracy": result.accuracy}


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
        sync(self.device)
        t0 = time.perf_counter()
        _, accuracy = blog.evaluate(self.model, loader, self.criterion, self.device)
        sync(self.device)
        return {"seconds": time.perf_counter() - t0, "n": len(loader.dataset), "accuracy": accuracy}


# ------------------------------------------------------------------ context shared by the benchmarks
@dataclass
class Context:
    device: torch.device
    sizes: Sizes
    log: Callable[[str], None]
    workdir: Path
    _datasets: dict = field(default_factory=dict)
    worker_peaks_mb: list[float] = field(default_factory=list)  # filled by the worker benchmark
    tuned: bool = False  # brnn_core.allocator applied in this process (CPU, as the worker does)

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
        if self.device.type == "cuda":
            modes = ["off", "fp16"]
            if torch.cuda.is_bf16_supported():
                modes.insert(1, "bf16")
            return modes
        if self.device.type == "cpu":
            return ["off", "bf16"]
        return ["off"]


# ------------------------------------------------------------------ 1. training: engine vs blog
def bench_train(ctx: Context) -> list[Row]:
    s = ctx.sizes
    dev, tuned = ctx.device, ctx.tuned
    specs = {"brnn_core engine": ("engine", dev, tuned, {}),
             "blog loop": ("blog", dev, False, {}),
             "engine, host sync every step": ("engine", dev, tuned, {"log_interval": 1})}
    if tuned:
        specs["engine, default allocator"] = ("engine", dev, False, {})
    with children(specs) as sides:
        for side in sides.values():
            side.call("train", steps=s.warmup_steps)
        res = alternate({name: (lambda side=side: side.samples_per_s(s.train_steps)) for name, side in sides.items()},
                        s.reps, ctx.log, "train ")
        faults = {name: side.faults for name, side in sides.items()}
    batch = TrainConfig().batch_size
    note = f"{s.train_steps} steps of batch {batch} on mnist-sample, after {s.warmup_steps} warm-up"
    rows = [
        throughput_row("train", "brnn_core engine", res["brnn_core engine"],
                       note + "; uint8 data on the device, loss read every 10 steps"
                       + ("; glibc allocator tuned as the worker does" if tuned else "")),
        throughput_row("train", "blog loop", res["blog loop"],
                       "PIL + ToTensor + DataLoader, loss.item() every step; a plain Python process"),
        ratio_row("train", "engine / blog", res["brnn_core engine"], res["blog loop"], target=1.1,
                  note="same data, hyperparameters and device; alternated"),
        throughput_row("train", "engine, host sync every step", res["engine, host sync every step"],
                       "log_interval=1: loss read back after every step"),
        ratio_row("train", "engine / engine with sync every step", res["brnn_core engine"],
                  res["engine, host sync every step"], note="what avoiding the per-step sync gains"),
    ]
    if "engine, default allocator" in res:
        rows += [
            throughput_row("train", "engine, default allocator", res["engine, default allocator"],
                           "the same engine with glibc's default malloc settings"),
            ratio_row("train", "engine / engine with default allocator", res["brnn_core engine"],
                      res["engine, default allocator"], note="what brnn_core.allocator gains"),
        ]
    if any(any(v) for v in faults.values()):  # where the allocator gain comes from (and why it varies)
        for name in ("brnn_core engine", "engine, default allocator", "blog loop"):
            if name in faults:
                f = faults[name]
                rows.append(Row("train", f"page faults: {name}", "page faults", median(f), "per step", min(f),
                                max(f), len(f), note="minor faults (fresh zeroed pages) per training step"))
    return rows


# ------------------------------------------------------------------ amp
def bench_amp(ctx: Context) -> list[Row]:
    s = ctx.sizes
    x, y = ctx.train_data()
    modes = ctx.amp_modes()
    if len(modes) < 2:
        return [Row("amp", "skipped", "note", float("nan"), "", note=f"no mixed precision on {ctx.device.type}")]
    trainers = {m: EngineTrainer(x, y, ctx.device, amp=m) for m in modes}
    for t in trainers.values():
        t.run(s.warmup_steps)
    res = alternate({f"amp {m}": (lambda t=t: t.samples_per_s(s.train_steps)) for m, t in trainers.items()},
                    s.reps, ctx.log, "amp ")
    rows = [throughput_row("amp", f"engine, amp {m}", res[f"amp {m}"], f"{s.train_steps} steps of batch 100")
            for m in modes]
    rows += [ratio_row("amp", f"amp {m} / amp off", res[f"amp {m}"], res["amp off"], note="above 1 means faster")
             for m in modes[1:]]
    return rows


# ------------------------------------------------------------------ 2. the dashboard's worker
def worker_config(ctx: Context) -> TrainConfig:
    """The default TrainConfig, one epoch of mnist-sample on the bench device (quick: a shorter epoch)."""
    overrides = {"dataset": "mnist-sample", "epochs": 1, "device": str(ctx.device), **ctx.sizes.worker_overrides}
    return TrainConfig().replace(**overrides).validate()


def worker_window(cfg: TrainConfig, n_images: int) -> tuple[int, int, int]:
    """(first, last, samples): the logged steps the worker is timed between, and the images trained in between.

    The first log interval is warm-up; timing runs from the first logged step to the last one of the epoch.
    """
    n_train = n_images - max(1, int(round(n_images * cfg.val_fraction)))  # as data.split_train_val
    steps_per_epoch = math.ceil(n_train / cfg.batch_size)
    first = cfg.log_interval
    last = steps_per_epoch // cfg.log_interval * cfg.log_interval
    if last <= first:
        raise RuntimeError(f"a {steps_per_epoch}-step epoch logs fewer than two points at log_interval "
                           f"{cfg.log_interval}")
    return first, last, min(last * cfg.batch_size, n_train) - first * cfg.batch_size


def run_worker_once(ctx: Context, runs_dir: Path) -> dict:
    """One training run through jobs.start_worker; timings from its metrics.csv, peak RSS from wait4."""
    from .jobs import start_worker

    cfg = worker_config(ctx)
    first, last, samples = worker_window(cfg, len(ctx.train_data()[0]))
    t0 = time.time()
    run, proc = start_worker(runs_dir, cfg)
    peak_sampled, rusage = 0, None
    deadline = time.monotonic() + 900
    try:
        import psutil

        watched = psutil.Process(proc.pid)
    except Exception:  # noqa: BLE001 - sampling is only a fallback
        watched = None
    while True:
        if hasattr(os, "wait4"):  # reaps the worker and returns its own resource usage
            pid, wait_status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(wait_status)
                break
        elif proc.poll() is not None:
            break
        if watched is not None:
            with contextlib.suppress(Exception):
                peak_sampled = max(peak_sampled, watched.memory_info().rss)
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"worker run {run.path} took over 15 minutes; killed")
        time.sleep(0.05)
    wall = time.time() - t0
    final = run.status()
    if final.get("state") != "finished":
        log_tail = (run.path / "worker.log").read_text(errors="replace")[-800:]
        raise RuntimeError(f"worker ended {final.get('state')}: {final.get('message')}\n{log_tail}")
    metrics = run.metrics()
    train = metrics[metrics["split"] == "train"].set_index("step")
    if first not in train.index or last not in train.index:
        raise RuntimeError(f"worker run {run.path} did not log steps {first} and {last}")
    seconds = float(train.loc[last, "elapsed_s"] - train.loc[first, "elapsed_s"])
    reported = [float(v) for step, v in train["samples_per_s"].items() if first < step <= last]
    if rusage is not None:  # ru_maxrss: kilobytes on Linux, bytes on macOS
        peak_mb = rusage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    else:
        peak_mb = peak_sampled / 2**20
    return {"samples_per_s": samples / seconds, "reported": median(reported), "wall_s": wall,
            "startup_s": wall - float(final.get("elapsed_s") or 0.0), "peak_mb": peak_mb}


def bench_worker(ctx: Context) -> list[Row]:
    s = ctx.sizes
    x, y = ctx.train_data()
    runs_dir = ctx.workdir / "worker-runs"
    cfg = worker_config(ctx)
    first, last, _ = worker_window(cfg, len(x))
    steps = last - first
    # The bare engine gets the worker's thread count (worker.py: TrainConfig.cpu_threads, all cores but one
    # by default, unless OMP_NUM_THREADS is set), so that the comparison measures the worker's machinery only.
    threads = (cpu_threads(cfg.cpu_threads) if ctx.device.type == "cpu" else None) or torch.get_num_threads()
    spec = {"hidden_size": cfg.hidden_size, "batch_size": cfg.batch_size, "log_interval": cfg.log_interval,
            "threads": threads}
    worker_runs: list[dict] = []

    def worker_case() -> float:
        info = run_worker_once(ctx, runs_dir)
        worker_runs.append(info)
        ctx.worker_peaks_mb.append(info["peak_mb"])
        return info["samples_per_s"]

    engine = Child("engine", ctx.device, tuned=ctx.tuned, spec=spec)
    try:
        if s.worker_warmup:  # an untimed run: the first process start reads torch from a cold disk cache
            ctx.worker_peaks_mb.append(run_worker_once(ctx, runs_dir)["peak_mb"])
        engine.call("train", steps=first)  # the worker's timed window also starts after `first` steps
        res = alternate({"bare engine": lambda: engine.samples_per_s(steps), "worker": worker_case},
                        s.worker_reps, ctx.log, "worker ")
    finally:
        engine.close()
    eng, wrk = res["bare engine"], res["worker"]
    overhead = [100 * (e / w - 1) for e, w in zip(eng, wrk, strict=False)]
    value = 100 * (median(eng) / median(wrk) - 1)
    window = f"steps {first}->{last} of a 1-epoch mnist-sample run"
    startup = [r["startup_s"] for r in worker_runs]
    wall = [r["wall_s"] for r in worker_runs]
    return [
        throughput_row("worker", "bare engine", eng,
                       f"{steps} steps, hidden {cfg.hidden_size}, batch {cfg.batch_size}, "
                       f"log every {cfg.log_interval}, {threads} thread(s); a fresh process set up like the worker"),
        throughput_row("worker", "worker (wall time)", wrk, f"{window}, from metrics.csv elapsed_s"),
        throughput_row("worker", "worker (reported samples_per_s)", [r["reported"] for r in worker_runs],
                       "median of metrics.csv samples_per_s (what the dashboard shows)"),
        Row("worker", "worker overhead vs bare engine", "overhead", value, "%", min(overhead), max(overhead),
            len(overhead), "< 10", "yes" if value < 10 else "no",
            "extra wall time per sample: control polling, status/metrics writes, heartbeats"),
        Row("worker", "worker start-up", "time", median(startup), "s", min(startup), max(startup), len(startup),
            note="spawn -> training starts: interpreter, torch import, dataset load, model build"),
        Row("worker", "worker run, 1 epoch", "time", median(wall), "s", min(wall), max(wall), len(wall),
            note="spawn -> exit, including validation, the test report and checkpoints"),
    ]


# ------------------------------------------------------------------ 3. evaluation
def bench_eval(ctx: Context) -> list[Row]:
    s = ctx.sizes
    name, x, _ = ctx.eval_data()
    spec = {"eval_dataset": name}
    specs = {"engine.evaluate": ("engine-eval", ctx.device, ctx.tuned, spec),
             "blog eval loop": ("blog-eval", ctx.device, False, spec)}
    # the reduced-precision path, whose accuracy effect bench/eval_precision.py measures on trained checkpoints
    low = next((m for m in ctx.amp_modes() if m != "off"), None)
    if low:
        specs[f"engine.evaluate, amp {low}"] = ("engine-eval", ctx.device, ctx.tuned, {**spec, "amp": low})
    with children(specs) as sides:
        for side in sides.values():
            side.call("eval", warmup=True)
        res = alternate({k: (lambda side=side: side.call("eval")["seconds"]) for k, side in sides.items()},
                        s.eval_reps, ctx.log, "eval seconds ")
    n = len(x)
    eng_sps = [n / t for t in res["engine.evaluate"]]
    blog_sps = [n / t for t in res["blog eval loop"]]
    what = f"{name} test set, {n} images"
    eng, bl = res["engine.evaluate"], res["blog eval loop"]
    rows = [
        Row("eval", "engine.evaluate", "time", median(eng), "s", min(eng), max(eng), len(eng),
            note=f"{what}, eval batch {TrainConfig().eval_batch_size} (the default)"),
        throughput_row("eval", "engine.evaluate", eng_sps, "probabilities and predictions kept, as the worker does"),
        Row("eval", "blog eval loop", "time", median(bl), "s", min(bl), max(bl), len(bl),
            note=f"{what}, DataLoader batch 100, loss.item() per batch"),
        throughput_row("eval", "blog eval loop", blog_sps, "a plain Python process"),
        ratio_row("eval", "engine / blog", eng_sps, blog_sps, target=2.0, note="alternated, fp32 both"),
    ]
    if low:
        case = f"engine.evaluate, amp {low}"
        low_sps = [n / t for t in res[case]]
        rows += [
            throughput_row("eval", case, low_sps, f"autocast {low}; accuracy effect: bench/eval_precision.md"),
            ratio_row("eval", f"engine {low} / blog", low_sps, blog_sps, target=2.0,
                      note=f"alternated; the engine in {low} autocast, the blog in fp32"),
        ]
    return rows


# ------------------------------------------------------------------ 4. prediction latency
def synthetic_canvas(size: int = 280, stroke: int = 20) -> np.ndarray:
    """A hand-drawn-looking '2' as the dashboard's canvas returns it: (size, size, 4) uint8 RGBA."""
    from PIL import Image, ImageDraw

    img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    k = size / 280
    points = [(95, 95), (120, 65), (165, 60), (190, 90), (180, 130), (140, 170), (95, 215), (150, 212), (200, 210)]
    ImageDraw.Draw(img).line([(px * k, py * k) for px, py in points], fill=(255, 255, 255, 255),
                             width=max(1, round(stroke * k)), joint="curve")
    return np.asarray(img).copy()


def bench_predict(ctx: Context) -> list[Row]:
    from .checkpoint import save_checkpoint
    from .data import MNIST_CLASSES
    from .inference import Predictor, prepare

    torch.manual_seed(0)
    path = ctx.workdir / "predict.pt"
    save_checkpoint(path, BiLSTM(ModelConfig()), classes=MNIST_CLASSES)
    canvas = synthetic_canvas()
    calls = ctx.sizes.predict_calls
    devices = [torch.device("cpu")] + ([ctx.device] if ctx.device.type != "cpu" else [])
    rows: list[Row] = []
    for device in devices:
        predictor = Predictor.from_checkpoint(path, device)
        if predictor.predict(canvas) is None:
            raise RuntimeError("the synthetic canvas read as blank")
        x = prepare(canvas)
        timings: dict[str, list[float]] = {"predict": [], "preprocess": [], "model": []}

        def model_only(x=x, predictor=predictor, device=device):
            with torch.inference_mode():
                predictor.model(x.unsqueeze(0).to(device)).softmax(dim=1).cpu()

        steps = {"predict": lambda predictor=predictor: predictor.predict(canvas),
                 "preprocess": lambda: prepare(canvas), "model": model_only}
        for _ in range(max(5, calls // 20)):  # warm-up
            for fn in steps.values():
                fn()
        for _ in range(calls):  # interleaved, so load changes hit all three alike
            for key, fn in steps.items():
                sync(device)
                t0 = time.perf_counter()
                fn()
                sync(device)
                timings[key].append(1000 * (time.perf_counter() - t0))
        ctx.log(f"predict on {device}: median {median(timings['predict']):.2f} ms")
        where = f"model on {device}"
        p95 = percentile(timings["predict"], 95)
        rows += [
            Row("predict", f"Predictor.predict ({where})", "latency median", median(timings["predict"]), "ms",
                min(timings["predict"]), max(timings["predict"]), calls,
                note="280x280 RGBA canvas -> probabilities, preprocessing included"),
            Row("predict", f"Predictor.predict ({where})", "latency p95", p95, "ms", reps=calls, target="< 30",
                met="yes" if p95 < 30 else "no"),
            Row("predict", "preprocess only (inference.prepare)", "latency median", median(timings["preprocess"]),
                "ms", min(timings["preprocess"]), max(timings["preprocess"]), calls,
                note="grey, crop, resize to 20, centre of mass"),
            Row("predict", f"model only ({where})", "latency median", median(timings["model"]), "ms",
                min(timings["model"]), max(timings["model"]), calls, note="one 28x28 image, batch 1"),
        ]
    return rows


# ------------------------------------------------------------------ 5. scaling
def timed_steps(trainer: EngineTrainer, min_seconds: float, min_steps: int = 2) -> tuple[float, float]:
    """Train until at least `min_seconds` and `min_steps` have passed: (samples/s, ms per step)."""
    samples = steps = 0
    seconds = 0.0
    while seconds < min_seconds or steps < min_steps:
        n, dt = trainer.run(1)
        samples, steps, seconds = samples + n, steps + 1, seconds + dt
    return samples / seconds, 1000 * seconds / steps


@contextlib.contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    previous = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def bench_scaling(ctx: Context) -> list[Row]:
    """Short measurements of many configurations, swept round-robin `scaling_sweeps` times."""
    s = ctx.sizes
    x, y = ctx.train_data()
    cfg = TrainConfig()
    # case -> (trainer, threads or None, note)
    points: dict[str, tuple[EngineTrainer, int | None, str]] = {}
    for bs in s.scaling_batches:
        points[f"train, batch {bs}"] = (EngineTrainer(x, y, ctx.device, batch_size=bs), None,
                                        f"hidden {cfg.hidden_size}")
    for hidden in s.scaling_hidden:
        points[f"train, hidden {hidden}"] = (EngineTrainer(x, y, ctx.device, hidden_size=hidden), None,
                                             f"batch {cfg.batch_size}")
    if ctx.device.type == "cpu":
        default_threads = torch.get_num_threads()
        for n in sorted({1, default_threads, *(n for n in (2, 4, 8) if n <= default_threads)}):
            points[f"train, {n} thread{'s' if n > 1 else ''}"] = (
                EngineTrainer(x, y, ctx.device), n,
                f"torch.set_num_threads({n}){' (this run)' if n == default_threads else ''}")
    for trainer, threads, _ in points.values():
        with num_threads(threads):
            trainer.run(1)  # warm-up (first call for this shape)
    results: dict[str, list[tuple[float, float]]] = {case: [] for case in points}
    for sweep in range(s.scaling_sweeps):
        for case, (trainer, threads, _) in points.items():
            with num_threads(threads):
                results[case].append(timed_steps(trainer, s.scaling_seconds))
            ctx.log(f"scaling {case}: {results[case][-1][0]:,.0f} samples/s (sweep {sweep + 1}/{s.scaling_sweeps})")
    rows = []
    for case, (_, _, note) in points.items():
        sps = [r[0] for r in results[case]]
        ms = median([r[1] for r in results[case]])
        rows.append(Row("scaling", case, "throughput", median(sps), "samples/s", min(sps), max(sps), len(sps),
                        note=f"{ms:.1f} ms/step; {note}"))

    # evaluation throughput against the eval batch size, also swept round-robin
    _, ex, ey = ctx.eval_data()
    ex, ey = ex[:s.scaling_eval_images].to(ctx.device), ey[:s.scaling_eval_images].to(ctx.device)
    torch.manual_seed(0)
    model = BiLSTM(ModelConfig()).to(ctx.device)
    eval_sps: dict[int, list[float]] = {bs: [] for bs in s.scaling_eval_batches}
    for bs in s.scaling_eval_batches:
        evaluate(model, ex[:bs], ey[:bs], batch_size=bs)  # warm-up
    for _ in range(s.scaling_sweeps):
        for bs in s.scaling_eval_batches:
            sync(ctx.device)
            t0 = time.perf_counter()
            evaluate(model, ex, ey, batch_size=bs)
            sync(ctx.device)
            eval_sps[bs].append(len(ex) / (time.perf_counter() - t0))
            ctx.log(f"scaling eval batch {bs}: {eval_sps[bs][-1]:,.0f} samples/s")
    for bs, sps in eval_sps.items():
        default = " (the default)" if bs == cfg.eval_batch_size else ""
        rows.append(Row("scaling", f"evaluate, eval batch {bs}", "throughput", median(sps), "samples/s", min(sps),
                        max(sps), len(sps), note=f"{len(ex)} images{default}"))
    rows += step_breakdown(ctx)
    return rows


def step_breakdown(ctx: Context) -> list[Row]:
    """Share of a default training step spent in data, forward, backward and the optimizer."""
    x, y = ctx.train_data()
    trainer = EngineTrainer(x, y, ctx.device)
    trainer.run(2)
    model, opt = trainer.model, trainer.optimizer
    xd, yd = trainer.x, trainer.y
    parts = {"data (index + to float)": 0.0, "forward + loss": 0.0, "backward": 0.0, "optimizer step": 0.0}
    names = list(parts)
    model.train()
    marks: list[float] = []

    def mark() -> None:
        sync(ctx.device)
        marks.append(time.perf_counter())

    for idx in trainer._index_batches(ctx.sizes.breakdown_steps):
        marks.clear()
        mark()
        xb, yb = to_input(xd[idx]), yd[idx]
        mark()
        loss = F.cross_entropy(model(xb), yb)
        mark()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        mark()
        opt.step()
        mark()
        for i, name in enumerate(names):
            parts[name] += marks[i + 1] - marks[i]
    total = sum(parts.values())
    per_step = 1000 * total / ctx.sizes.breakdown_steps
    note = f"{ctx.sizes.breakdown_steps} default steps, synchronised between parts; {per_step:.1f} ms/step"
    return [Row("scaling", f"step time: {name}", "share", 100 * t / total, "%", note=note)
            for name, t in parts.items()]


# ------------------------------------------------------------------ 6. memory
def bench_memory(ctx: Context) -> list[Row]:
    if not ctx.worker_peaks_mb:
        ctx.worker_peaks_mb.append(run_worker_once(ctx, ctx.workdir / "worker-runs")["peak_mb"])
    peaks = ctx.worker_peaks_mb
    rows = [Row("memory", "worker peak RSS", "memory", median(peaks), "MB", min(peaks), max(peaks), len(peaks),
                note="1-epoch mnist-sample worker run, ru_maxrss from wait4 (whole process: Python, torch, data)")]
    if ctx.device.type == "cuda":
        x, y = ctx.train_data()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(ctx.device)
        trainer = EngineTrainer(x, y, ctx.device)
        trainer.run(max(2, ctx.sizes.train_steps // 4))
        train_peak = torch.cuda.max_memory_allocated(ctx.device) / 2**20
        torch.cuda.reset_peak_memory_stats(ctx.device)
        _, ex, ey = ctx.eval_data()
        evaluate(trainer.model, ex.to(ctx.device), ey.to(ctx.device), batch_size=TrainConfig().eval_batch_size)
        eval_peak = torch.cuda.max_memory_allocated(ctx.device) / 2**20
        rows += [Row("memory", "CUDA max allocated, training", "memory", train_peak, "MB",
                     note="default config, mnist-sample on the device (torch.cuda.max_memory_allocated)"),
                 Row("memory", "CUDA max allocated, evaluation", "memory", eval_peak, "MB",
                     note="test set on the device, default eval batch")]
    return rows


RUNNERS: dict[str, Callable[[Context], list[Row]]] = {
    "train": bench_train, "amp": bench_amp, "worker": bench_worker, "eval": bench_eval,
    "predict": bench_predict, "scaling": bench_scaling, "memory": bench_memory,
}


# ------------------------------------------------------------------ machine description and output
def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    if sys.platform == "darwin":
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                  timeout=5).stdout.strip()
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    """HEAD of the source tree, read without writing anything."""
    root = Path(__file__).resolve().parent.parent
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    return None


def machine_info(device: torch.device) -> dict:
    import psutil

    info = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model(),
        "cpu": cpu_model(),
        "cores": psutil.cpu_count(logical=False) or os.cpu_count(),
        "logical_cpus": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cpu_capability": getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")(),
        "mkldnn": bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark) if device.type == "cuda" else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "brnn_core": __version__,
        "git_commit": git_commit(),
    }
    with contextlib.suppress(ImportError):
        import torchvision

        info["torchvision"] = torchvision.__version__
    if hasattr(os, "getloadavg"):
        info["load_avg_start"] = [round(v, 2) for v in os.getloadavg()]
    return info


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if a >= 1 else f"{value:.3f}"


def format_table(rows: list[Row], meta: dict) -> str:
    head = ["bench", "case", "metric", "value", "unit", "range (min-max)", "spread", "n", "target", "note"]
    body = [[r.bench, r.case, r.metric, _fmt(r.value), r.unit,
             f"{_fmt(r.lo)} - {_fmt(r.hi)}" if r.lo is not None and r.hi is not None else "",
             "" if r.spread is None else f"{r.spread:.0f}%{' !' if r.spread > 20 else ''}", str(r.reps),
             f"{r.target} {'ok' if r.met == 'yes' else 'MISSED'}" if r.target else "", r.note] for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body, strict=False)]
    widths[-1] = len(head[-1])  # the note runs on freely
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()  # noqa: E731
    out = [f"brnn_core bench, {meta['date']}: {meta['device']} ({meta['device_name']}), {meta['cpu']}, "
           f"{meta['cores']} cores, {meta['threads']} torch threads, torch {meta['torch']}"
           + (f", load average {meta.get('load_avg_start')} -> {meta.get('load_avg_end')}" if meta.get("load_avg_start")
              else ""), "", line(head), line(["-" * w for w in widths])]
    out += [line(cells) for cells in body]
    return "\n".join(out)


def rows_to_csv(rows: list[Row], meta: dict) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS + META_IN_CSV, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        values = {**asdict(r), "spread_pct": None if r.spread is None else round(r.spread, 2)}
        writer.writerow({**{k: ("" if v is None else v) for k, v in values.items()},
                         **{k: meta.get(k, "") for k in META_IN_CSV}})
    return buf.getvalue()


def write_results(out_dir: Path, rows: list[Row], meta: dict, errors: list[dict]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d_%H%M%S", time.strptime(meta["date"][:19], "%Y-%m-%dT%H:%M:%S"))
    slug = "".join(c if c.isalnum() else "-" for c in (meta["device"] if meta["device"] == "cpu"
                                                       else f"{meta['device']}-{meta['device_name']}").lower())
    blob_csv = rows_to_csv(rows, meta).encode()
    json_rows = [{**asdict(r), "spread_pct": None if r.spread is None else round(r.spread, 2)} for r in rows]
    blob_json = (json.dumps({"meta": meta, "rows": json_rows, "errors": errors}, indent=2,
                            default=str) + "\n").encode()
    written = []
    for base in (f"{stamp}_{slug}", "latest"):
        for suffix, blob in ((".csv", blob_csv), (".json", blob_json)):
            path = out_dir / f"{base}{suffix}"
            atomic_write(path, lambda fh, b=blob: fh.write(b))
            written.append(path)
    return written


def _clean(value):
    """NaN -> None so that the JSON is standard."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


# ------------------------------------------------------------------ entry point
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m brnn_core bench",
                                     description="Benchmark suite; see bench/README.md for what each row means.")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run, under a minute)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help=f"comma-separated benchmarks to run (default all): {', '.join(BENCHES)}")
    parser.add_argument("--out", type=Path, default=Path("bench/results"),
                        help="results folder (default bench/results)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per side of each comparison")
    parser.add_argument("--steps", type=int, default=None, help="training steps per measurement")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for the whole run")
    parser.add_argument("--malloc-tuning", choices=["on", "off"], default="on",
                        help="on CPU, tune glibc's allocator in this process as the training worker does (default on)")
    parser.add_argument("--no-save", action="store_true", help="print the table only")
    parser.add_argument("--serve", choices=["engine", "blog", "engine-eval", "blog-eval"],
                        help=argparse.SUPPRESS)  # internal: run as a Child
    parser.add_argument("--serve-spec", default="{}", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    selected = [n.strip() for item in args.only for n in item.split(",") if n.strip()] or list(BENCHES)
    unknown = [n for n in selected if n not in BENCHES]
    if unknown:
        print(f"error: unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    problem = device_problem(args.device)
    if problem:
        print(f"error: --device: {problem}", file=sys.stderr)
        return 2
    for flag in ("reps", "steps", "threads"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            print(f"error: --{flag} must be at least 1", file=sys.stderr)
            return 2
    device = resolve_device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the worker processes this run starts
    if args.serve:
        return serve(args.serve, device, json.loads(args.serve_spec))
    tuned = device.type == "cpu" and args.malloc_tuning == "on" and tune_malloc()
    sizes = Sizes.quick() if args.quick else Sizes()
    if args.reps:
        sizes.reps = sizes.eval_reps = sizes.worker_reps = args.reps
    if args.steps:
        sizes.train_steps = args.steps
    log = lambda msg: print(f"  {msg}", file=sys.stderr, flush=True)  # noqa: E731
    meta = machine_info(device)
    worker_threads = (cpu_threads(TrainConfig().cpu_threads) if device.type == "cpu" else None) \
        or torch.get_num_threads()
    meta.update(malloc_tuned=tuned, worker_threads=worker_threads, quick=args.quick, benches=selected,
                argv=list(argv or []),
                sizes={f.name: getattr(sizes, f.name) for f in fields(sizes)})
    rows: list[Row] = []
    errors: list[dict] = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="brnn-bench-") as tmp:
        ctx = Context(device=device, sizes=sizes, log=log, workdir=Path(tmp), tuned=tuned)
        for name in BENCHES:  # fixed order: memory reuses the worker's runs
            if name not in selected:
                continue
            print(f"[{name}]", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                rows += RUNNERS[name](ctx)
            except Exception as exc:  # noqa: BLE001 - report, then run the other benchmarks
                errors.append({"bench": name, "error": f"{type(exc).__name__}: {exc}"})
                print(f"  {name} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            log(f"{name} took {time.perf_counter() - t0:.0f}s")
    for r in rows:
        for k in ("value", "lo", "hi"):
            setattr(r, k, _clean(getattr(r, k)))
    if hasattr(os, "getloadavg"):
        meta["load_avg_end"] = [round(v, 2) for v in os.getloadavg()]
    meta["duration_s"] = round(time.perf_counter() - t_all, 1)
    print(format_table(rows, meta))
    for err in errors:
        print(f"error in {err['bench']}: {err['error']}")
    if not args.no_save:
        written = write_results(args.out, rows, meta, errors)
        print(f"\nwritten: {', '.join(str(p) for p in written)}")
    return 1 if errors else 0
