"""How long `make` takes to build a new venv: tools/install.py (requirements-lock.txt in two pips side by side)
against one `pip install -r requirements.txt`, each into a fresh venv, alternated so a change of load hits both.

    .venv/bin/python -m benchmarks.venv_build [--rounds 3] [--dir /tmp]

Each venv takes about 7 GB, one at a time, removed after its timing. Packages come from wherever pip is
configured to find them (on the project's machines a local index: no download of PyTorch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.rows import alternate

REPO = Path(__file__).resolve().parent.parent
WAYS = {
    "tools/install.py": lambda py: [str(py), str(REPO / "tools" / "install.py")],
    "pip install -r requirements.txt": lambda py: [str(py), "-m", "pip", "install", "-r",
                                                   str(REPO / "requirements.txt")],
}


def timed_build(way: str, where: Path) -> float:
    """Seconds for `way` to fill a new venv made under `where` (the venv is removed afterwards)."""
    venv = Path(tempfile.mkdtemp(prefix="venv-build-", dir=where))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        started = time.perf_counter()
        python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
        done = subprocess.run(WAYS[way](python), capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(f"{way} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return seconds
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.venv_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="builds of each way, alternated (default 3)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the venvs are made (default the temp folder; needs about 8 GB free)")
    parser.add_argument("--json", type=Path, default=None, help="also write the timings here")
    args = parser.parse_args(argv)
    times = alternate({way: (lambda way=way: timed_build(way, args.dir)) for way in WAYS}, args.rounds,
                      lambda line: print(line, flush=True), label="seconds for ")
    for way, values in times.items():
        spread = f"{min(values):.1f}-{max(values):.1f}"
        print(f"{way}: mean {statistics.mean(values):.1f} s ({spread}, n={len(values)})")
    ratios = [a / b for a, b in zip(*times.values(), strict=True)]
    print(f"tools/install.py / pip -r: {statistics.mean(ratios):.2f} (each round's pair: "
          f"{', '.join(f'{r:.2f}' for r in ratios)})")
    if args.json:
        args.json.write_text(json.dumps({"seconds": times, "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
