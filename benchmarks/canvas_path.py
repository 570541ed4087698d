"""The canvas path against how MNIST was made: which preprocessing reads pen strokes best.

    .venv/bin/python -m benchmarks.canvas_path CKPT [CKPT ...] --limit 8000

Draws real MNIST test digits (`--digits`, default ../shared/data/mnist-test-8k.npz) as canvas strokes
(benchmarks/drawn_digits.py) and scores each checkpoint through `data.canvas.preprocess` with each `pen` softening
of the stroke edges and each `deslant` share; only the preprocessing changes between columns. Decision:
docs/decisions/010-canvas-slant-step.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from benchmarks import drawn_digits
from brnn_core.data.canvas import preprocess
from brnn_core.inference.predictor import Predictor
from brnn_core.model import mode

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = {  # column -> (pen, deslant)
    "as drawn": (0.0, 0.0), "pen 0.3": (0.3, 0.0), "pen 0.6": (0.6, 0.0), "pen 1.0": (1.0, 0.0),
    "deslant 0.5": (0.0, 0.5), "deslant 0.75": (0.0, 0.75), "deslant 1.0": (0.0, 1.0),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+", type=Path)
    ap.add_argument("--digits", type=Path, default=ROOT.parent / "shared" / "data" / "mnist-test-8k.npz")
    ap.add_argument("--limit", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    digits, labels = drawn_digits.npz_digits(args.digits)
    digits, labels = digits[:args.limit], labels[:args.limit]
    canvases = drawn_digits.drawn_set(digits, args.seed)
    inputs = {name: torch.from_numpy(np.stack([preprocess(c, pen=pen, deslant=deslant).numpy() for c in canvases]))
              for name, (pen, deslant) in VARIANTS.items()}
    print(f"{len(canvases)} MNIST test digits drawn as strokes (seed {args.seed}); accuracy by preprocessing:")
    for ckpt in args.checkpoints:
        model = Predictor.from_checkpoint(ckpt).model  # what Predictor.predict runs, a batch at a time
        with torch.inference_mode(), mode(model, False):
            accs = {name: float((model(x).argmax(dim=1).numpy() == labels).mean()) for name, x in inputs.items()}
        print(f"  {ckpt}: " + "  ".join(f"{name}: {100 * a:.2f}%" for name, a in accs.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
