"""What machine a measurement ran on: CPU model, cores, torch build, source commit.

Benchmark results are only comparable between runs on the same hardware and software, so every
result file (the suite's and the scripts' in benchmarks/) carries this description.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import psutil
import torch
import torchvision

from brnn_core import __version__


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
    root = Path(__file__).resolve().parents[2]  # the checkout brnn_core/ sits in
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    return None


def machine_info(device: torch.device) -> dict:
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
        "torchvision": torchvision.__version__,
    }
    if hasattr(os, "getloadavg"):
        info["load_avg_start"] = [round(v, 2) for v in os.getloadavg()]
    return info
