"""Drawn-digit benchmark: MNIST test digits redrawn as brush strokes on the dashboard's canvas.

    .venv/bin/python bench/drawn_digits.py runs/<id>/checkpoints/best.pt [more.pt ...]
    .venv/bin/python bench/drawn_digits.py CKPT --seeds 0 1 2 --preview /tmp/drawn.png

Why: a model trained on centred, thin-stroked MNIST digits recognises MNIST test digits well, but
the canvas gives it something else: a round brush of 18-22 px on 280x280, drawn at any size, slant
and place. This set looks like canvas input and is scored through the full canvas path
(`Predictor.predict` on the RGBA canvas: grey, crop, resize to 20, centre of mass, 28x28).

How each digit is made (see `render`): one of the 500 digits of mnist-sample's test split is
upsampled 4x, thresholded and skeletonised (scikit-image) to 1-px strokes; the stroke pixels are
joined to their 8-neighbours and redrawn with a round brush of random width 18-22 px, after a
random size (digit height 110-240 px), slant (shear -0.35..0.35), rotation (-12..12 degrees) and
position on a transparent 280x280 RGBA canvas, white ink, anti-aliased (drawn at 2x, downsampled).

No image is shared with training: the sample's test split is disjoint from its train split (the
script checks that no test digit's bytes occur among the 4,500 training digits), and every model
here trains on the train split only. Numbers go to bench/README.md ("Drawn digits").
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CANVAS = 280
SUPERSAMPLE = 2
UPSAMPLE = 4  # skeletonise at 112x112: smoother strokes than the 28x28 pixel grid gives
STROKE_PX = (18, 22)
HEIGHT_PX = (110, 240)
SHEAR = 0.35
ROTATE_DEG = 12.0


def skeleton_points(digit: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """(P, 2) stroke pixel coordinates (y, x) on the upsampled grid, and index pairs of 8-neighbours."""
    from skimage.morphology import skeletonize

    big = Image.fromarray(digit).resize((28 * UPSAMPLE, 28 * UPSAMPLE), Image.Resampling.BICUBIC)
    mask = np.asarray(big, dtype=np.float32) > 0.45 * 255
    skel = skeletonize(mask)
    ys, xs = np.nonzero(skel)
    index = {(y, x): i for i, (y, x) in enumerate(zip(ys.tolist(), xs.tolist(), strict=True))}
    pairs = []
    for (y, x), i in index.items():
        for dy, dx in ((0, 1), (1, -1), (1, 0), (1, 1)):  # each neighbour pair once
            j = index.get((y + dy, x + dx))
            if j is not None:
                pairs.append((i, j))
    return np.stack([ys, xs], axis=1).astype(np.float64), pairs


def render(digit: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One MNIST digit (28, 28) uint8 -> a (280, 280, 4) uint8 canvas drawing of it."""
    points, pairs = skeleton_points(digit)
    if not len(points):
        raise ValueError("digit has no strokes")
    centre = (points.max(axis=0) + points.min(axis=0)) / 2
    p = points - centre  # (P, 2) as (y, x)
    height = max(np.ptp(p[:, 0]), 1.0)
    scale = rng.uniform(*HEIGHT_PX) / height
    shear, angle = rng.uniform(-SHEAR, SHEAR), np.deg2rad(rng.uniform(-ROTATE_DEG, ROTATE_DEG))
    x = p[:, 1] - shear * p[:, 0]  # slant: the top leans right for shear > 0
    y = p[:, 0]
    cos, sin = np.cos(angle), np.sin(angle)
    xy = np.stack([cos * x - sin * y, sin * x + cos * y], axis=1) * scale  # (P, 2) as (x, y), canvas px
    width = rng.uniform(*STROKE_PX)
    lo, hi = xy.min(axis=0) - width / 2, xy.max(axis=0) + width / 2
    room = np.maximum(CANVAS - (hi - lo), 0)
    xy = xy - lo + rng.uniform(0, 1, 2) * room  # a random place where the whole digit fits
    if (hi - lo).max() > CANVAS:  # too big for the canvas at this slant: shrink about its centre
        xy = (xy - xy.mean(axis=0)) * (CANVAS - width) / (hi - lo).max() + CANVAS / 2
    s = SUPERSAMPLE
    img = Image.new("RGBA", (CANVAS * s, CANVAS * s), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    r = width * s / 2
    pts = [(float(a) * s, float(b) * s) for a, b in xy]
    for i, j in pairs:
        draw.line([pts[i], pts[j]], fill=(255, 255, 255, 255), width=round(width * s))
    for a, b in pts:  # round brush: a disc at every stroke point closes joints and caps
        draw.ellipse([a - r, b - r, a + r, b + r], fill=(255, 255, 255, 255))
    return np.asarray(img.resize((CANVAS, CANVAS), Image.Resampling.LANCZOS))


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
