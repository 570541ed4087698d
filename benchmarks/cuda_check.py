"""`make bench-gpu`: everything the CUDA path has to prove, in one command (under 8 minutes on one GPU).

    python3 -m benchmarks.cuda_check --data-dir DIR [--out benchmarks/results] [--budget-s 400] [--trials 4]
    python3 -m benchmarks.cuda_check --device cpu --quick     # smoke test of this script on a CPU

Runs on a bare python3 with torch, numpy, pandas and pillow; Streamlit and Ray rows skip where they are missing.
Without CUDA it prints one line and exits 0. Checks (CHECKS; each row's meaning: its function's docstring and
benchmarks/README.md, "GPU") in cuda_checks_training and cuda_checks_entrypoints; cuda_checks_bench runs them.
Fashion-MNIST from --data-dir or $BRNN_DATA_DIR. Results: one file, OUT/<date>_<device>_gpu-check.json.
"""


from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# in the order they run: the quick ones first, so the budget leaves out the slow ones (rerun with --only)
CHECKS = ("crash", "dtype", "speed", "graphs", "amp", "cells", "batch", "accuracy", "trials", "picker")
BUDGET_S = 400  # no check starts after this; the slowest (accuracy) then still ends within 8 minutes


def no_cuda_line() -> str | None:
    """The one line printed where there is no CUDA GPU (None where there is one)."""
    import torch  # lazy: --help answers without loading torch

    if torch.cuda.is_available():
        return None
    return (f"bench-gpu: no CUDA GPU on this machine (torch {torch.__version__}, CUDA build "
            f"{torch.version.cuda or 'none'}): nothing to check; run it on a machine with an NVIDIA GPU")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a smoke test")
    parser.add_argument("--data-dir", type=Path, default=None, help="datasets folder (default $BRNN_DATA_DIR)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per side of the accuracy comparison")
    parser.add_argument("--trials", type=int, default=4, help="runs sharing the GPU at once")
    parser.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated: {', '.join(CHECKS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test; numbers meaningless)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="seconds after which no check starts")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda"):
        line = no_cuda_line()
        if line:
            print(line)
            return 0
    unknown = [c for c in args.only.split(",") if c and c not in CHECKS]
    if unknown:
        print(f"error: unknown check {', '.join(unknown)}; choose from {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    from benchmarks.cuda_checks_bench import (
        run_checks,  # lazy: brnn_core and the checks load only to run them
    )

    return run_checks(args, [c for c in CHECKS if c in args.only.split(",")])


if __name__ == "__main__":
    sys.exit(main())
