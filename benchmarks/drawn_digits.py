"""Drawn-digit benchmark: mnist-sample's 500 held-out test digits redrawn as brush strokes on the canvas.

    .venv/bin/python -m benchmarks.drawn_digits CKPT [CKPT ...] [--seeds 0 1 2] [--preview /tmp/drawn.png]

Each digit's skeleton is redrawn by `brnn_core.data.strokes.render` (random brush, size, slant, rotation, place on
a 280x280 RGBA canvas) and scored through the whole canvas path (`Predictor.predict`). The script checks that no
test digit's bytes occur in the train split. Training sees other digits drawn by the same renderer (`drawn_share`),
so read it next to benchmarks/canvas_path.py and benchmarks/letterforms.py (targets: benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from pathlib import Path

import numpy as np
from PIL import Image

from brnn_core.data.strokes import CANVAS, render

ROOT = Path(__file__).resolve().parent.parent


def bench_digits() -> tuple[np.ndarray, np.ndarray]:
    """mnist-sample's 500 test digits and labels, checked to share no image with its train split."""
    from brnn_core.data.loading import load_dataset

    ds = load_dataset("mnist-sample")
    train = {hashlib.sha1(img.tobytes()).digest() for img in ds.train_x.numpy()}
    shared = sum(hashlib.sha1(img.tobytes()).digest() in train for img in ds.test_x.numpy())
    if shared:
        raise SystemExit(f"{shared} test digits also occur in the training split: the benchmark would not be held out")
    return ds.test_x.numpy(), ds.test_y.numpy()


def npz_digits(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Digits from an .npz of `images` (N, 28, 28) uint8 and `labels` (N,)."""
    with np.load(path) as z:
        return z["images"].astype(np.uint8), z["labels"].astype(np.int64)


def drawn_set(digits: np.ndarray, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [render(d, rng) for d in digits]


def score(ckpt: Path, canvases: list[np.ndarray], labels: np.ndarray) -> dict:
    """Accuracy of `Predictor.predict` on the canvases, overall and per class."""
    from brnn_core.inference.predictor import Predictor

    predictor = Predictor.from_checkpoint(ckpt)
    pred = np.array([int(np.argmax(predictor.predict(c))) for c in canvases])
    per_class = [float((pred[labels == c] == c).mean()) for c in range(10)]
    return {"accuracy": float((pred == labels).mean()), "per_class": per_class}


def preview(canvases: list[np.ndarray], path: Path, n: int = 40) -> None:
    """A grid of the first n drawings on black (what the canvas shows)."""
    cols, size = 10, 112
    rows = (min(n, len(canvases)) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * size, rows * size))
    for k, c in enumerate(canvases[:n]):
        tile = Image.alpha_composite(Image.new("RGBA", (CANVAS, CANVAS), (0, 0, 0, 255)), Image.fromarray(c))
        sheet.paste(tile.convert("RGB").resize((size, size)), ((k % cols) * size, (k // cols) * size))
    sheet.save(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="one drawn set per seed")
    parser.add_argument("--preview", type=Path, help="save a PNG grid of the first drawings (first seed)")
    parser.add_argument("--digits", type=Path, help="draw these digits instead: an .npz of `images` (N, 28, 28) "
                                                    "uint8 and `labels`, e.g. real MNIST test digits")
    parser.add_argument("--limit", type=int, help="only the first N digits (every class, in the file's order)")
    args = parser.parse_args(argv)
    digits, labels = npz_digits(args.digits) if args.digits else bench_digits()
    if args.limit:
        digits, labels = digits[:args.limit], labels[:args.limit]
    print(f"{len(digits)} held-out digits ({args.digits or 'mnist-sample test split, none in its train split'})")
    results: dict[Path, list[float]] = {c: [] for c in args.checkpoints}
    for seed in args.seeds:
        t0 = time.perf_counter()
        canvases = drawn_set(digits, seed)
        print(f"seed {seed}: drew {len(canvases)} canvases in {time.perf_counter() - t0:.1f}s")
        if args.preview and seed == args.seeds[0]:
            preview(canvases, args.preview)
        for ckpt in args.checkpoints:
            r = score(ckpt, canvases, labels)
            results[ckpt].append(r["accuracy"])
            worst = sorted(range(10), key=lambda c: r["per_class"][c])[:3]
            print(f"  {ckpt}: {100 * r['accuracy']:.1f}%  (worst: "
                  + ", ".join(f"{c} {100 * r['per_class'][c]:.0f}%" for c in worst) + ")")
    if len(args.seeds) > 1:
        for ckpt, accs in results.items():
            print(f"{ckpt}: mean {100 * statistics.mean(accs):.1f}% over seeds {args.seeds}, "
                  f"sd {100 * statistics.stdev(accs):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
