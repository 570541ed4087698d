"""What machine a measurement ran on: CPU model, cores, torch build, source commit.

Benchmark results are only comparable between runs on the same hardware and software, so every
result file (the suite's and the scripts' in benchmarks/) carries this description.
"""

from __future__ import annotations

import os
import platform
import time

import psutil
import torch
import torchvision

from brnn_core import __version__
from brnn_core.environment import cpu_model, git_commit


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
        "git_commit": git_commit(short=True),
        "torchvision": torchvision.__version__,
    }
    if hasattr(os, "getloadavg"):
        info["load_avg_start"] = [round(v, 2) for v in os.getloadavg()]
    return info
