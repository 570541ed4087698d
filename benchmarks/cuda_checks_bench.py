"""The harness of benchmarks/cuda_check.py: `Bench` (rows, sizes, device, data), running the checks, the results.

Imported by cuda_check.py only once there is something to check: it loads torch and brnn_core, which the
no-CUDA line and --help do without.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import cuda_checks_entrypoints as entrypoints
from benchmarks import cuda_checks_training as training
from brnn_core.benchmarks.machine import machine_info
from brnn_core.benchmarks.results import clean_rows, format_table, write_results
from brnn_core.benchmarks.rows import Row
from brnn_core.data.datasets import DatasetError
from brnn_core.data.loading import load_dataset

REPO = Path(__file__).resolve().parent.parent
CHECKS = {"crash": training.check_crash, "speed": training.check_speed, "accuracy": training.check_accuracy,
          "amp": training.check_amp, "picker": entrypoints.check_picker, "trials": entrypoints.check_trials}


class Bench:
    """Rows in the suite's format, sizes, the device and the data, shared by the checks."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.device = args, torch.device(args.device)
        self.quick = args.quick
        self.rows: list = []
        self.errors: list[dict] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="brnn-gpu-"))
        self.data_dir = Path(args.data_dir or os.environ.get("BRNN_DATA_DIR") or REPO / "data").resolve()
        self.dataset, self.ds, self.data_note = self._load_data()
        self.epochs = 1 if self.quick else 2

    def _load_data(self):
        name = "mnist-sample" if self.quick else "fashion-mnist"
        try:
            return name, load_dataset(name, self.data_dir, download=False), ""
        except DatasetError as exc:
            note = f"MISSING: fashion-mnist is not in {self.data_dir} ({str(exc).splitlines()[0]})"
            print(f"bench-gpu: {note}\n  the accuracy rows are skipped; put the four IDX files (.gz) in "
                  f"{self.data_dir}/FashionMNIST/raw or pass --data-dir", flush=True)
            return None, None, note

    def train_data(self):
        """(images, labels) uint8/int64 on the CPU: the dataset's training set, or random images without it."""
        if self.ds is not None:
            return self.ds.train_x, self.ds.train_y
        g = torch.Generator().manual_seed(0)
        n = 5000 if self.quick else 60000
        return torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g), torch.randint(0, 10, (n,),
                                                                                                   generator=g)

    def add(self, bench: str, case: str, metric: str, value, unit: str, *, values: list[float] | None = None,
            target: str = "", met: bool | None = None, note: str = "") -> None:
        lo, hi = (min(values), max(values)) if values else (None, None)
        row = Row(bench, case, metric, float(value) if value is not None else float("nan"), unit, lo, hi,
                  len(values or [1]), target, "" if met is None else ("yes" if met else "no"), note)
        self.rows.append(row)
        print(f"  {bench:9} {case:48} {row.value:12,.4g} {unit:10} {target} "
              f"{'' if met is None else ('ok' if met else 'MISSED')} {note}", flush=True)

    def check(self, name: str, fn) -> None:
        """Run one check; a failure is a row of its own and the others still run."""
        print(f"[{name}]", flush=True)
        t0 = time.perf_counter()
        try:
            fn(self)
        except Exception as exc:  # noqa: BLE001 - report it, run the rest
            self.errors.append({"bench": name, "error": f"{type(exc).__name__}: {exc}"})
            print(f"  {name} FAILED: {type(exc).__name__}: {exc}", flush=True)
        print(f"  ({time.perf_counter() - t0:.0f}s)", flush=True)


def run_checks(args: argparse.Namespace, names: list[str]) -> int:
    """Run the named checks in order, print and write the results; 1 when a check failed."""
    if args.device.startswith("cuda"):
        torch.backends.cudnn.benchmark = True
    started = time.perf_counter()
    b = Bench(args)
    try:
        for name in names:
            b.check(name, CHECKS[name])
        written = write(b, started)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(b.tmp, ignore_errors=True)
    if written:
        print(f"\nwritten: {', '.join(str(p) for p in written)}")
    print(f"bench-gpu took {time.perf_counter() - started:.0f}s")
    return 1 if b.errors else 0


def write(b: Bench, started: float) -> list[Path]:
    meta = machine_info(b.device)
    meta.update(check="bench-gpu", quick=b.quick, data=b.data_note or str(b.data_dir), seeds=b.args.seeds,
                duration_s=round(time.perf_counter() - started, 1))
    if hasattr(os, "getloadavg"):
        meta["load_avg_end"] = [round(v, 2) for v in os.getloadavg()]
    clean_rows(b.rows)
    table = format_table(b.rows, meta)
    print("\n" + table)
    for err in b.errors:
        print(f"error in {err['bench']}: {err['error']}")
    if b.args.no_save:
        return []
    written = write_results(b.args.out, b.rows, meta, b.errors, tag="gpu-check", latest=False)
    md = written[0].with_suffix(".md")
    md.write_text("```\n" + table + "\n```\n" + "".join(f"\nerror in {e['bench']}: {e['error']}\n" for e in b.errors))
    return [*written, md]
