"""Smoke test of the benchmark suite: `python -m benchmarks --quick` runs and writes sane files.

No timing is asserted (the machine may be busy); only that every expected row is there and
every number is a positive, finite value.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from brnn_core.devices import cpu_has_bf16

pytestmark = [pytest.mark.slow, pytest.mark.worker]

ROOT = Path(__file__).resolve().parent.parent

EXPECTED = {  # (bench, case, metric) rows that a CPU run must produce
    ("train", "brnn_core engine", "throughput"),
    ("train", "blog loop", "throughput"),
    ("train", "engine / blog", "ratio"),
    ("worker", "worker (wall time)", "throughput"),
    ("worker", "worker overhead vs bare engine", "overhead"),
    ("worker", "worker start-up", "time"),
    ("eval", "engine.evaluate", "time"),
    ("eval", "blog eval loop", "throughput"),
    ("eval", "engine / blog", "ratio"),
    ("predict", "Predictor.predict (model on cpu)", "latency median"),
    ("predict", "Predictor.predict (model on cpu)", "latency p95"),
    ("scaling", "train, batch 32", "throughput"),
    ("scaling", "train, hidden 64", "throughput"),
    ("scaling", "evaluate, eval batch 100", "throughput"),
    ("scaling", "step time: backward", "share"),
    ("memory", "worker peak RSS", "memory"),
    ("defaults", "CLI, default settings", "throughput"),
    ("defaults", "CLI, amp=off", "throughput"),
    ("defaults", "blog loop, plain process", "throughput"),
    ("defaults", "CLI defaults / blog loop", "ratio"),
    ("defaults", "CLI amp=off / blog loop", "ratio"),
}
BF16_ROWS = {  # where the CPU has native bf16 (AVX512-BF16 or AMX); without it bf16 is skipped, not failed
    ("amp", "amp bf16 / amp off", "ratio"),
    ("eval", "engine.evaluate, amp bf16", "throughput"),
    ("eval", "engine bf16 / blog", "ratio"),
}


def run_quick(out: Path, device: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "benchmarks", "--quick", "--device", device, "--out", str(out)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=540)


def check_results(out: Path, device: str) -> None:
    latest_json = json.loads((out / "latest.json").read_text())
    with open(out / "latest.csv", newline="") as fh:
        csv_rows = list(csv.DictReader(fh))
    dated = sorted(p.name for p in out.iterdir() if p.name != "latest.json" and p.name != "latest.csv")
    assert len(dated) == 2 and dated[0].endswith(".csv") and dated[1].endswith(".json"), dated
    assert device.split(":")[0] in dated[0]

    meta = latest_json["meta"]
    assert meta["device"].startswith(device)
    assert meta["torch"] == torch.__version__
    assert meta["cpu"] and meta["cores"] >= 1 and meta["date"]
    assert latest_json["errors"] == []

    rows = latest_json["rows"]
    keys = {(r["bench"], r["case"], r["metric"]) for r in rows}
    expected = EXPECTED | (BF16_ROWS if device != "cpu" or cpu_has_bf16() else set())
    assert keys >= expected, sorted(expected - keys)
    assert len(csv_rows) == len(rows)
    for r, c in zip(rows, csv_rows, strict=True):
        assert (c["bench"], c["case"], c["metric"]) == (r["bench"], r["case"], r["metric"])
        assert c["device"] == meta["device"] and c["torch"] == meta["torch"]
        if r["metric"] == "note":  # a benchmark this machine cannot run says so (e.g. amp without bf16)
            assert r["value"] is None and r["note"], r
            continue
        if r["metric"] == "overhead":  # may be slightly negative on a noisy machine
            assert math.isfinite(r["value"]), r
            continue
        assert isinstance(r["value"], int | float) and math.isfinite(r["value"]), r
        # a count (page faults per step) can be 0 with the tuned allocator; every other number is positive
        assert r["value"] >= 0 if r["metric"] == "page faults" else r["value"] > 0, r
        assert float(c["value"]) == pytest.approx(r["value"])
        if r["lo"] is not None:  # a count (page faults) can be 0 in its best round
            assert 0 <= r["lo"] <= r["value"] <= r["hi"] or r["metric"] == "ratio", r
            assert r["lo"] <= r["hi"], r


def test_bench_quick_cpu(tmp_path):
    out = tmp_path / "results"
    proc = run_quick(out, "cpu")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "engine / blog" in proc.stdout  # the table was printed
    check_results(out, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bench_quick_cuda(tmp_path):
    out = tmp_path / "results"
    proc = run_quick(out, "cuda")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    check_results(out, "cuda")
