"""What a run ran on: its code, packages, machine and command line, as `environment.json` in its folder.

`collect` is cheap on purpose (a run starts with it): package versions come from `importlib.metadata` without
starting pip, the CPU's flags from /proc/cpuinfo, and git is asked at most three short questions with a timeout,
only when brnn_core is imported from a checkout (an installed package has no commit, so the record has no
`git`); packages and git are read once per process. `record` writes the file at each start of a run and says in
an event what changed since the last start (a resume on another machine or after an upgrade). `cpu_model` and
`git_commit` also describe the machine a benchmark ran on (benchmarks/machine.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import socket
import subprocess
import sys
import time
from importlib.metadata import distributions
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from brnn_core import __version__
from brnn_core.fileio import atomic_write_json, read_json

if TYPE_CHECKING:
    import torch

    from brnn_core.runs.rundir import Run

FILE = "environment.json"
FORMAT_VERSION = 1
GIT_TIMEOUT_S = 5.0
ENV_PREFIXES = ("BRNN_", "OMP_")
# The CPU flags that decide which precisions and kernels this machine runs natively (docs/decisions/016-amp-auto.md)
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# What a resume compares with the last start's record; the rest (time, command, variables) changes every start
COMPARED = ("git", "python", "torch", "torchvision", "cuda", "cudnn", "cpu", "gpus", "packages")


def checkout_root() -> Path | None:
    """The git checkout brnn_core is imported from, None when it is installed (no .git beside it)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / ".git").exists() else None


def _git(root: Path, *args: str) -> bytes | None:
    """One git command's output in `root` (None when git is missing, fails or takes longer than the timeout)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=GIT_TIMEOUT_S,
                              env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})  # reading must not take git's locks
        if done.returncode == 0:
            return done.stdout
    return None


def git_commit(short: bool = False) -> str | None:
    """HEAD of the checkout brnn_core is imported from, None when installed or git is missing."""
    root = checkout_root()
    out = _git(root, "rev-parse", *(["--short"] if short else []), "HEAD") if root else None
    return (out or b"").decode().strip() or None


@functools.cache  # once per process: the code it runs was read when it started (sweeps train many runs in one)
def git_state() -> dict | None:
    """{commit, dirty, diff_sha256, untracked} of the checkout, None when installed or git cannot say.

    `dirty`: tracked files differ from the commit or untracked files exist; `diff_sha256` hashes `git diff HEAD`
    (tracked changes, so two runs with the same hash ran the same edits); `untracked` counts the files git does
    not track and does not ignore (they are not in the hash)."""
    root = checkout_root()
    commit = git_commit() if root else None
    if commit is None:
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=normal") or b""
    lines = status.decode(errors="replace").splitlines()
    untracked = sum(line.startswith("??") for line in lines)
    diff = _git(root, "diff", "HEAD", "--no-ext-diff", "--no-color", "--binary") if len(lines) > untracked else b""
    return {"commit": commit, "dirty": bool(lines), "untracked": untracked,
            "diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None}


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


def cpu_flags() -> dict[str, bool] | None:
    """Which of CPU_FLAGS the CPU has (Linux's /proc/cpuinfo); None where it cannot be read."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return {flag: flag in have for flag in CPU_FLAGS}
    return None


def packages() -> dict[str, str]:
    """Every installed distribution's version, by name (the first found where a name is installed twice)."""
    return dict(_packages())


@functools.cache  # once per process, as git_state
def _packages() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in distributions():
        name = dist.metadata["Name"]
        if name and name not in found:
            found[name] = dist.version
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def command_line() -> list[str]:
    """This process's command line as it was started (`python -m brnn_core train ...`, with the -m that sys.argv
    loses), or the interpreter and sys.argv where the OS does not say."""
    with contextlib.suppress(psutil.Error, OSError):
        return psutil.Process().cmdline()
    return [sys.executable, *sys.argv]


def gpus() -> list[dict]:
    """Name, memory and compute capability of each CUDA GPU this process sees ([] without one)."""
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        out.append({"index": index, "name": props.name, "memory_gb": round(props.total_memory / 2**30, 1),
                    "capability": f"{props.major}.{props.minor}"})
    return out


def collect(device: torch.device | str | None = None) -> dict[str, Any]:
    """The environment of this process, as environment.json holds it (docs/run-directory.md)."""
    import torch

    installed = packages()
    record: dict[str, Any] = {
        "format_version": FORMAT_VERSION, "recorded": time.time(), "host": socket.gethostname(),
        "command": command_line(), "cwd": os.getcwd(), "brnn_core": __version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "torch": torch.__version__, "torchvision": installed.get("torchvision"), "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device) if device is not None else None,
        "cpu": {"model": cpu_model(), "logical_cpus": os.cpu_count(), "flags": cpu_flags(),
                "torch_capability": torch.backends.cpu.get_cpu_capability()},
        "gpus": gpus(), "packages": installed,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
    }
    git = git_state()
    if git is not None:
        record["git"] = dict(git)
    return record


def changes(before: dict, after: dict) -> list[str]:
    """What differs between two records in what matters to a result (COMPARED), one short phrase each."""
    said = []
    for key in COMPARED:
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if key == "packages" and isinstance(old, dict) and isinstance(new, dict):
            said += [f"{name} {old.get(name, 'absent')} -> {new.get(name, 'absent')}"
                     for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
        elif key == "git" and isinstance(old, dict) and isinstance(new, dict):
            said += [f"git {part} {old.get(part)} -> {new.get(part)}" for part in ("commit", "diff_sha256")
                     if old.get(part) != new.get(part)]
        else:
            said.append(f"{key} changed")
    return said


def record(run: Run, device: torch.device | str | None = None) -> dict:
    """Write the run's environment.json for this start; an `environment` event lists what changed since the last
    start's record (nothing for a first start). Returns the record."""
    path = run.path / FILE
    before = read_json(path)
    now = collect(device)
    atomic_write_json(path, now)
    if isinstance(before, dict):
        changed = changes(before, now)
        if changed:
            shown = changed[:10] + ([f"and {len(changed) - 10} more"] if len(changed) > 10 else [])
            run.log_event("environment", "the environment changed since the last start: " + "; ".join(shown),
                          changed=changed)
    return now
