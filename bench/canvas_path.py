"""The canvas path against how MNIST was made: which preprocessing reads pen strokes best.

    .venv/bin/python bench/canvas_path.py CKPT [CKPT ...] --limit 8000

MNIST's digits were written with a pen, scanned, anti-aliased into a 20x20 box and centred by their centre
of mass; the canvas gives a hard-edged round brush. This draws real MNIST test digits (`--digits`, default
the 8,000 in ../shared/data/mnist-test-8k.npz) as canvas strokes (bench/drawn_digits.py) and scores each
checkpoint through `data.canvas.preprocess` with each `pen` softening (a Gaussian of that many output
pixels on the stroke edges before the resize) and each `deslant` (the share of the digit's slant, beyond
MNIST's mean, that is straightened). Only the preprocessing changes between columns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import drawn_digits  # noqa: E402

from brnn_core.data.canvas import preprocess  # noqa: E402
from brnn_core.inference.predictor import Predictor  # noqa: E402
from brnn_core.model import mode  # noqa: E402

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
