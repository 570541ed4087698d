"""Installs the project's packages into the venv that runs this script: `make run` and `make test` call it when the
venv is new or requirements.txt or requirements-lock.txt changed.

On the platform requirements-lock.txt was written on (its header names it), it installs the lock's exact versions:
every package, with `--no-deps` (the lock is complete, and `pip check` confirms it afterwards), in two pips side by
side. The biggest packages (PyTorch's CUDA stack: torch, triton, NVIDIA's and CUDA's wheels, about 4 GB to unpack;
then Ray, pyarrow, SciPy, SymPy and plotly, thousands of files each to compile) go in one, the other hundred or so in
the other: about the same time each, so a new venv keeps both cores of a two-core machine busy, not one. The
groups share no package folder: the NVIDIA and CUDA wheels, which share `nvidia` and `cuda`, all go in the first.
Anywhere else, or when the lock no longer pins what requirements.txt pins, it installs requirements.txt as the
README's lines for Windows do.

    python tools/install.py          # install (what make runs)
    python tools/install.py --lock   # rewrite requirements-lock.txt from this venv, after a change to requirements.txt
"""

from __future__ import annotations

import argparse
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "requirements.txt"
LOCK = REPO / "requirements-lock.txt"
PIP = [sys.executable, "-m", "pip"]
# the first pip's packages, by normalised name: PyTorch's CUDA stack, then the biggest others, chosen by timing both
# pips (benchmarks.venv_build; tests/test_lock.py checks that the two never share a package folder)
BIG = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|ray|pyarrow|scipy|sympy|plotly)$")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;#]+)")


def this_platform() -> str:
    return f"{platform.system()} {platform.machine()}, {platform.python_implementation()} " \
           f"{sys.version_info.major}.{sys.version_info.minor}"


def normalise(name: str) -> str:
    """PEP 503's name normalisation (packaging's canonicalize_name: not installed yet when this script runs)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line (comments and other lines are skipped)."""
    found = {}
    for line in text.splitlines():
        match = PIN.match(line.strip())
        if match:
            found[normalise(match.group(1))] = match.group(3)
    return found


def lock_platform(text: str) -> str | None:
    match = re.search(r"^# platform: (.+)$", text, re.M)
    return match.group(1).strip() if match else None


def why_not_locked(requirements: str, lock: str, here: str) -> str | None:
    """Why the lock cannot be used here, or None."""
    written_on = lock_platform(lock)
    if written_on is None:
        return "requirements-lock.txt is missing or names no platform"
    if written_on != here:
        return f"requirements-lock.txt was written on {written_on}, this is {here}"
    locked = pins(lock)
    stale = [f"{name}=={version}" for name, version in pins(requirements).items() if locked.get(name) != version]
    if stale:
        return (f"requirements-lock.txt does not pin {', '.join(stale)} as requirements.txt does: after this install, "
                f"`{sys.executable} tools/install.py --lock` rewrites it")
    return None


def split(lock: str) -> tuple[list[str], list[str]]:
    """The lock's `name==version` lines: (the biggest packages, everything else)."""
    big, rest = [], []
    for name, version in pins(lock).items():
        (big if BIG.match(name) else rest).append(f"{name}=={version}")
    return big, rest


def install_locked(lock: str) -> int:
    big, rest = split(lock)
    print(f"installing requirements-lock.txt: the {len(big)} biggest packages (PyTorch's CUDA stack, Ray, ...) beside "
          f"the other {len(rest)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "biggest.txt").write_text("\n".join(big) + "\n")
        (Path(tmp) / "the-rest.txt").write_text("\n".join(rest) + "\n")
        pip_install = [*PIP, "install", "--no-deps", "-r"]
        # one progress bar on the terminal: the biggest packages' (PyTorch's downloads are the long ones)
        pips = [subprocess.Popen([*pip_install, str(Path(tmp) / "biggest.txt")]),
                subprocess.Popen([*pip_install, str(Path(tmp) / "the-rest.txt"), "--progress-bar", "off"])]
        codes = [p.wait() for p in pips]
    if any(codes):
        return next(c for c in codes if c)
    return subprocess.run([*PIP, "check"]).returncode  # a package the lock forgot would show here


def install() -> int:
    lock = LOCK.read_text() if LOCK.is_file() else ""
    reason = why_not_locked(REQUIREMENTS.read_text(), lock, this_platform())
    if reason is None:
        return install_locked(lock)
    print(f"{reason}: installing requirements.txt instead", flush=True)
    return subprocess.run([*PIP, "install", "-r", str(REQUIREMENTS)]).returncode


def write_lock() -> int:
    frozen = subprocess.run([*PIP, "freeze", "--all"], capture_output=True, text=True, check=True).stdout
    lines = sorted((line for line in frozen.splitlines() if PIN.match(line) and not line.lower().startswith("pip==")),
                   key=str.lower)
    missing = sorted(set(pins(REQUIREMENTS.read_text())) - set(pins("\n".join(lines))))
    if missing:
        print(f"this venv lacks {', '.join(missing)} of requirements.txt: install requirements.txt first",
              file=sys.stderr)
        return 1
    LOCK.write_text("# Every package `make` installs, at the versions pip resolved from requirements.txt\n"
                    "# (written by `python tools/install.py --lock`). Used on this platform only: anywhere else\n"
                    "# tools/install.py installs requirements.txt.\n"
                    f"# platform: {this_platform()}\n" + "\n".join(lines) + "\n")
    print(f"wrote {LOCK.name}: {len(lines)} packages", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python tools/install.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", action="store_true", help="rewrite requirements-lock.txt from this venv")
    return write_lock() if parser.parse_args().lock else install()


if __name__ == "__main__":
    sys.exit(main())
