"""`python -m benchmarks` (`make bench`): the benchmark suite (what each row means: benchmarks/README.md).

Benchmarks (pick with --only, BENCHES): train, amp, worker, eval, predict, scaling, memory, defaults.
Comparisons alternate (A B A B ...), each side in a fresh process where process set-up is part of what is
compared, so a load change hits every side alike; each row reports the median and the range. Results: one
printed table, OUT/<date>_<device>.{csv,json} and OUT/latest.{csv,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import torch

from benchmarks.harness.bench_defaults import bench_defaults
from benchmarks.harness.bench_eval import bench_eval
from benchmarks.harness.bench_predict import bench_predict
from benchmarks.harness.bench_scaling import bench_scaling
from benchmarks.harness.bench_training import bench_amp, bench_train
from benchmarks.harness.bench_worker import bench_memory, bench_worker
from benchmarks.harness.child import serve
from benchmarks.harness.context import Context, Sizes
from benchmarks.harness.machine import machine_info
from benchmarks.harness.results import clean_rows, format_table, write_results
from benchmarks.harness.rows import Row
from brnn_core.config import TrainConfig
from brnn_core.devices import device_problem, resolve_device
from brnn_core.training.allocator import tune_malloc
from brnn_core.training.threads import cpu_threads

BENCHES = ("train", "amp", "worker", "eval", "predict", "scaling", "memory", "defaults")
RUNNERS: dict[str, Callable[[Context], list[Row]]] = {
    "train": bench_train, "amp": bench_amp, "worker": bench_worker, "eval": bench_eval,
    "predict": bench_predict, "scaling": bench_scaling, "memory": bench_memory, "defaults": bench_defaults,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description="Benchmark suite; see benchmarks/README.md for what each row means.")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run, under a minute)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    parser.add_argument("--only", action="append", default=[], metavar="NAMES",
                        help=f"comma-separated benchmarks to run (default all): {', '.join(BENCHES)}")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"),
                        help="results folder (default benchmarks/results)")
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


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]] | str:
    """(options, selected benchmarks), or an error message naming the bad option."""
    args = build_parser().parse_args(argv)
    selected = [n.strip() for item in args.only for n in item.split(",") if n.strip()] or list(BENCHES)
    unknown = [n for n in selected if n not in BENCHES]
    if unknown:
        return f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHES)}"
    problem = device_problem(args.device)
    if problem:
        return f"--device: {problem}"
    for flag in ("reps", "steps", "threads"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            return f"--{flag} must be at least 1"
    return args, selected


def sizes_for(args: argparse.Namespace) -> Sizes:
    sizes = Sizes.quick() if args.quick else Sizes()
    if args.reps:
        sizes.reps = sizes.eval_reps = sizes.worker_reps = args.reps
    if args.steps:
        sizes.train_steps = args.steps
    return sizes


def run_benches(ctx: Context, selected: list[str]) -> tuple[list[Row], list[dict]]:
    """Every selected benchmark in the fixed order (memory reuses the worker's runs); a failure is reported
    and the others still run."""
    rows: list[Row] = []
    errors: list[dict] = []
    for name in BENCHES:
        if name not in selected:
            continue
        print(f"[{name}]", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            rows += RUNNERS[name](ctx)
        except Exception as exc:  # noqa: BLE001 - report, then run the other benchmarks
            errors.append({"bench": name, "error": f"{type(exc).__name__}: {exc}"})
            print(f"  {name} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        ctx.log(f"{name} took {time.perf_counter() - t0:.0f}s")
    return rows, errors


def main(argv: list[str] | None = None) -> int:
    parsed = parse(argv)
    if isinstance(parsed, str):
        print(f"error: {parsed}", file=sys.stderr)
        return 2
    args, selected = parsed
    device = resolve_device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the worker processes this run starts
    if args.serve:
        return serve(args.serve, device, json.loads(args.serve_spec))
    tuned = device.type == "cpu" and args.malloc_tuning == "on" and tune_malloc()
    sizes = sizes_for(args)
    log = lambda msg: print(f"  {msg}", file=sys.stderr, flush=True)  # noqa: E731
    meta = machine_info(device)
    worker_threads = (cpu_threads(TrainConfig().cpu_threads) if device.type == "cpu" else None) \
        or torch.get_num_threads()
    meta.update(malloc_tuned=tuned, worker_threads=worker_threads, quick=args.quick, benches=selected,
                argv=list(argv or []), sizes={f.name: getattr(sizes, f.name) for f in fields(sizes)})
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="brnn-bench-") as tmp:
        rows, errors = run_benches(Context(device=device, sizes=sizes, log=log, workdir=Path(tmp), tuned=tuned),
                                   selected)
    clean_rows(rows)
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
