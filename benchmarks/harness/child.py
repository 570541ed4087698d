"""Each side of a comparison in a fresh Python process of its own (`Child`), and that process's end (`serve`).

The child is `python -m benchmarks --serve KIND`: an internal option of the suite's CLI. `--quick` serves some
sides in the suite's own process instead (`LocalSide`), through the same `make_side` and `answer`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

from benchmarks.harness.sides import BlogEvaluator, BlogTrainer, EngineEvaluator, EngineTrainer, Trainer
from brnn_core.data.loading import load_dataset
from brnn_core.training.allocator import tune_malloc

try:
    import resource
except ImportError:  # Windows
    resource = None

CHECKOUT = Path(__file__).resolve().parents[2]  # the checkout: the child imports benchmarks and brnn_core from there


class Side:
    """A benchmark side driven by requests (`call`): a `Child` in a fresh process, or a `LocalSide` in this one."""

    kind: str
    faults: list[float]  # page faults per step of each timed training request

    def call(self, op: str, **args) -> dict:
        raise NotImplementedError

    def samples_per_s(self, steps: int) -> float:
        reply = self.call("train", steps=steps)
        self.faults.append(reply.get("faults_per_step", 0.0))
        return reply["samples"] / reply["seconds"]

    def ready(self) -> Side:
        return self

    def close(self) -> None:
        pass


class Child(Side):
    """One benchmark side in its own fresh Python process, driven one request at a time over a pipe.

    Each side gets a fresh process as a real run does (the blog script a plain one, the engine glibc's allocator
    tuned as the worker tunes it), so process history favours neither; one request at a time, so the sides run
    strictly one after the other (A B A B ...), never at the same time.

    kind: "engine" or "blog" (training steps), "engine-eval" or "blog-eval" (a whole test set).
    spec: EngineTrainer settings (hidden_size, batch_size, log_interval; a blog trainer takes hidden_size), the
    training `dataset` (default mnist-sample) and eval_dataset.
    """

    def __init__(self, kind: str, device: torch.device, *, tuned: bool, spec: dict | None = None):
        self.kind = kind
        cmd = [sys.executable, "-m", "benchmarks", "--serve", kind, "--device", str(device),
               "--threads", str(torch.get_num_threads()), "--serve-spec", json.dumps(spec or {})]
        env = {**os.environ, "BRNN_MALLOC_TUNING": "1" if tuned else "0", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=CHECKOUT)
        self.info: dict | None = None
        self.faults: list[float] = []

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

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class LocalSide(Side):
    """A side served in this process by the child's own `make_side` and `answer`, with no process to start: what
    `--quick` uses where a fresh process would cost more than the measurement (its numbers mean nothing anyway).
    It runs with this process's allocator and threads."""

    def __init__(self, kind: str, device: torch.device, spec: dict | None = None):
        self.kind = kind
        self.side = make_side(kind, device, spec or {})
        self.faults: list[float] = []

    def call(self, op: str, **args) -> dict:
        reply = answer(self.kind, self.side, {"op": op, **args})
        if "error" in reply:
            raise RuntimeError(f"benchmark side {self.kind}: {reply['error']}")
        return reply


def start_side(kind: str, device: torch.device, *, tuned: bool, spec: dict | None = None,
               local: bool = False) -> Side:
    """A Child (a fresh process, ready or not), or with `local` a LocalSide in this process."""
    return LocalSide(kind, device, spec) if local else Child(kind, device, tuned=tuned, spec=spec)


@contextlib.contextmanager
def children(specs: dict[str, tuple], *, local: bool = False) -> Iterator[dict[str, Side]]:
    """Start every child at once (they load in parallel), wait until all are ready, close them at the end; with
    `local`, every side is a LocalSide in this process instead."""
    started: dict[str, Side] = {}
    try:
        for name, (kind, device, tuned, spec) in specs.items():
            started[name] = start_side(kind, device, tuned=tuned, spec=spec, local=local)
        for child in started.values():
            child.ready()
        yield started
    finally:
        for child in started.values():
            child.close()


def minor_faults() -> int:
    """Page faults this process has taken so far (0 where `resource` is missing)."""
    if resource is None:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def make_side(kind: str, device: torch.device, spec: dict) -> Trainer | EngineEvaluator | BlogEvaluator:
    """The trainer or evaluator a child of this kind serves, on its dataset."""
    if kind in ("engine", "blog"):
        ds = load_dataset(spec.get("dataset") or "mnist-sample", download=False)
        if kind == "engine":
            return EngineTrainer(ds.train_x, ds.train_y, device, hidden_size=spec.get("hidden_size"),
                                 batch_size=spec.get("batch_size"), log_interval=spec.get("log_interval"))
        return BlogTrainer(ds.train_x, ds.train_y, device, hidden_size=spec.get("hidden_size"))
    if kind in ("engine-eval", "blog-eval"):
        test = load_dataset(spec.get("eval_dataset") or "mnist-sample", download=False)
        if kind == "engine-eval":
            return EngineEvaluator(test.test_x, test.test_y, device, amp=spec.get("amp", "off"))
        return BlogEvaluator(test.test_x, test.test_y, device)
    raise ValueError(f"unknown kind {kind!r}")


def answer(kind: str, side, req: dict) -> dict:
    """One request -> its reply: `train` for a trainer, `eval` for an evaluator."""
    if req["op"] == "train" and isinstance(side, Trainer):
        faults0 = minor_faults()
        samples, seconds = side.run(req["steps"])
        return {"samples": samples, "seconds": seconds,
                "faults_per_step": (minor_faults() - faults0) / max(1, req["steps"])}
    if req["op"] == "eval" and not isinstance(side, Trainer):
        return side.run(warmup=bool(req.get("warmup")))
    return {"error": f"a {kind} child cannot do {req['op']!r}"}


def serve(kind: str, device: torch.device, spec: dict) -> int:
    """The child's end of `Child`: one JSON request per stdin line, one JSON reply per stdout line."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies may reach the pipe

    def reply(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    tuned = device.type == "cpu" and tune_malloc()  # a no-op unless BRNN_MALLOC_TUNING allows it
    try:
        side = make_side(kind, device, spec)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    reply({"ready": True, "kind": kind, "malloc_tuned": tuned})
    for line in sys.stdin:
        try:
            reply(answer(kind, side, json.loads(line)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            reply({"error": f"{type(exc).__name__}: {exc}"})
    return 0
