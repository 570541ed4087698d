"""An MNIST digit redrawn as the dashboard's canvas would receive it: round-brush strokes on 280x280 RGBA.

A model trained on MNIST's pen reads canvas drawings (a hard round brush, any size, slant and place) worse than
MNIST digits; pen-stroke copies bridge that gap for training (`as_drawn`) and for scoring the canvas path
(`benchmarks/drawn_digits.py`). `render` upsamples, thresholds and skeletonises the digit, then redraws the
skeleton with a round brush of random width after a random size, slant, rotation and position (the ranges are
the constants below), anti-aliased by drawing at `supersample` x and downsampling.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

CANVAS = 280
SUPERSAMPLE = 2
UPSAMPLE = 4  # skeletonise at 112x112: smoother strokes than the 28x28 pixel grid gives
STROKE_PX = (18, 22)
HEIGHT_PX = (110, 240)
SHEAR = 0.35
ROTATE_DEG = 12.0


def ink_and_skeleton(digit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The digit's ink on the upsampled grid (bool (112, 112)) and its 1-px skeleton (same shape)."""
    from skimage.morphology import skeletonize  # scikit-image loads in about a second: only when drawing

    big = Image.fromarray(digit).resize((28 * UPSAMPLE, 28 * UPSAMPLE), Image.Resampling.BICUBIC)
    mask = np.asarray(big, dtype=np.float32) > 0.45 * 255
    return mask, skeletonize(mask)


def unexplained_ink(digit: np.ndarray) -> float:
    """Share of the digit's ink farther from its skeleton than the pen's half-width (+1.5 px).

    Near 0 for a digit written with one pen; high (over 0.1 for about 4 % of mnist-sample's, mostly 6, 2
    and 8) where the writer filled a loop in: the skeleton of a blob is a line, so a redrawing would lose
    the loop. The pen is the 30th percentile of the ink's half-width along the skeleton, not the median,
    which a large blob would pull up."""
    from scipy.ndimage import distance_transform_edt

    mask, skel = ink_and_skeleton(digit)
    if not skel.any():
        return 1.0
    half_width = float(np.percentile(distance_transform_edt(mask)[skel], 30))  # the pen, not the blob
    near = distance_transform_edt(~skel) <= half_width + 1.5
    return float((mask & ~near).sum() / mask.sum())


def skeleton_points(digit: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """(P, 2) stroke pixel coordinates (y, x) on the upsampled grid, and index pairs of 8-neighbours."""
    _, skel = ink_and_skeleton(digit)
    ys, xs = np.nonzero(skel)
    index = {(y, x): i for i, (y, x) in enumerate(zip(ys.tolist(), xs.tolist(), strict=True))}
    pairs = []
    for (y, x), i in index.items():
        for dy, dx in ((0, 1), (1, -1), (1, 0), (1, 1)):  # each neighbour pair once
            j = index.get((y + dy, x + dx))
            if j is not None:
                pairs.append((i, j))
    return np.stack([ys, xs], axis=1).astype(np.float64), pairs


def render(digit: np.ndarray, rng: np.random.Generator, *, supersample: int = SUPERSAMPLE) -> np.ndarray:
    """One MNIST digit (28, 28) uint8 -> a (280, 280, 4) uint8 canvas drawing of it.

    `supersample` 1 draws 5x faster with jaggier edges; after the canvas path's resize to 20x20 the two
    differ by a few grey levels (what training uses; the benchmark keeps 2)."""
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
    s = supersample
    img = Image.new("RGBA", (CANVAS * s, CANVAS * s), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    r = width * s / 2
    pts = [(float(a) * s, float(b) * s) for a, b in xy]
    for i, j in pairs:
        draw.line([pts[i], pts[j]], fill=(255, 255, 255, 255), width=round(width * s))
    for a, b in pts:  # round brush: a disc at every stroke point closes joints and caps
        draw.ellipse([a - r, b - r, a + r, b + r], fill=(255, 255, 255, 255))
    if s == 1:
        return np.asarray(img)
    return np.asarray(img.resize((CANVAS, CANVAS), Image.Resampling.LANCZOS))
