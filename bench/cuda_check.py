"""`make bench-gpu`: everything the CUDA path has to prove, in one command (a few minutes on an H100/H200).

    .venv/bin/python bench/cuda_check.py [--data-dir DIR] [--out bench/results] [--seeds 2] [--trials 4]
    .venv/bin/python bench/cuda_check.py --device cpu --quick     # smoke test of this script on a CPU

On a machine without CUDA it prints one line saying so and exits 0. Rows (bench/README.md, "GPU"):

  crash     the blog's loop without its fix (train, model.eval() to validate, train again): cuDNN raises
            "cudnn RNN backward can only be called in training mode" (expected); brnn_core's engine runs
            the same sequence (and fit trains on after each validation)
  speed     training samples/s on the GPU, brnn_core's engine vs the blog loop, alternated (target >= 3x)
  accuracy  test accuracy after 2 epochs of full Fashion-MNIST: brnn_core (a real run, run_training)
            vs the blog loop, mean over --seeds seeds each (target: within 0.5 points)
  amp       fp32, bf16 and fp16 (loss scaling): samples/s, 2-epoch test accuracy, fp16 steps skipped
  picker    the Train page's Device select (AppTest) lists the GPU of brnn_core.devices.device_choices()
  trials    --trials runs at once sharing the GPU (`python -m brnn_core train` processes: sweep trials are
            ordinary runs) vs one alone: aggregate samples/s; and a real sweep

Data: Fashion-MNIST from --data-dir (default $BRNN_DATA_DIR, else ./data, also /usr/share/datasets):
the GPU machine has no internet, so carry the four files along. Without them the accuracy rows say
MISSING and the speed rows run on random images (speed does not depend on pixel values).
Results: OUT/<date>_<device>_gpu-check.{csv,json} (the suite's format) and a Markdown table beside them.
The checks live beside this file: cuda_checks_training.py (crash, speed, accuracy, amp),
cuda_checks_entrypoints.py (picker, trials) and cuda_checks_bench.py (what they share, the results).
"""


from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
CHECKS = ("crash", "speed", "accuracy", "amp", "picker", "trials")  # in the order they run


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
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per side of the accuracy comparison")
    parser.add_argument("--trials", type=int, default=4, help="runs sharing the GPU at once")
    parser.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated: {', '.join(CHECKS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test; numbers meaningless)")
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
    from cuda_checks_bench import run_checks  # lazy: brnn_core, Streamlit and the checks load only to run them

    return run_checks(args, [c for c in CHECKS if c in args.only.split(",")])


if __name__ == "__main__":
    sys.exit(main())
