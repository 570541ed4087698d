"""Shapes that are not digits, drawn as the Predict page's canvas returns them: for measuring whether the
"does not look like a digit" check flags them (tests, benchmarks/experiments/honest_confidence.py).

Each shape is a few strokes in a box, drawn with a hand's wobble, a random size, slant, rotation, place and
a round brush of 16-24 px on a transparent 280x280 RGBA canvas, white ink (as `strokes.render` draws digits).
Shapes a digit could be written as (a plain circle, a vertical bar, an S, a Z) are left out on purpose.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from brnn_core.data.strokes import CANVAS, SUPERSAMPLE

Strokes = list[np.ndarray]  # each (P, 2) as (x, y), y down, in a box about 1 wide or tall


def _arc(cx: float, cy: float, rx: float, ry: float, a0: float, a1: float, n: int = 32) -> np.ndarray:
    t = np.radians(np.linspace(a0, a1, n))
    return np.stack([cx + rx * np.cos(t), cy + ry * np.sin(t)], axis=1)


def _lines(*points: tuple[float, float]) -> np.ndarray:
    return np.asarray(points, dtype=np.float64)


def _zigzag(rng: np.random.Generator) -> Strokes:
    n = int(rng.integers(3, 7))  # corners
    xs = np.linspace(0, 1, n + 1)
    ys = np.where(np.arange(n + 1) % 2 == 0, 0.0, rng.uniform(0.25, 0.45))
    return [np.stack([xs, ys], axis=1)]


def _scribble(rng: np.random.Generator) -> Strokes:
    """A smooth random path with many turns: the sum of a few random sine waves in x and y."""
    t = np.linspace(0, 1, 160)[:, None]
    freq = rng.uniform(1.5, 4.0, size=(1, 4))
    phase = rng.uniform(0, 2 * np.pi, size=(1, 4))
    waves = np.sin(2 * np.pi * freq * t + phase)  # (160, 4)
    return [np.stack([waves[:, 0] + 0.6 * waves[:, 1], waves[:, 2] + 0.6 * waves[:, 3]], axis=1)]


def _circle_with_cross(rng: np.random.Generator) -> Strokes:
    ring = _arc(0.5, 0.5, 0.5, 0.5, 0, 360, 48)
    if rng.random() < 0.5:  # a plus inside, else a cross
        return [ring, _lines((0.5, 0.0), (0.5, 1.0)), _lines((0.0, 0.5), (1.0, 0.5))]
    d = 0.5 - 0.5 / np.sqrt(2)
    return [ring, _lines((d, d), (1 - d, 1 - d)), _lines((1 - d, d), (d, 1 - d))]


def _star(rng: np.random.Generator) -> Strokes:
    angles = np.radians(-90 + 144 * np.arange(6))  # a five-pointed star in one stroke
    return [np.stack([0.5 + 0.5 * np.cos(angles), 0.5 + 0.5 * np.sin(angles)], axis=1)]


def _spiral(rng: np.random.Generator) -> Strokes:
    t = np.linspace(0, rng.uniform(2.5, 3.5) * 2 * np.pi, 120)
    r = t / t[-1]
    return [np.stack([0.5 + 0.5 * r * np.cos(t), 0.5 + 0.5 * r * np.sin(t)], axis=1)]


def _wave(rng: np.random.Generator) -> Strokes:
    x = np.linspace(0, 1, 100)
    return [np.stack([x, 0.2 * np.sin(2 * np.pi * rng.uniform(2.0, 3.5) * x)], axis=1)]


SHAPES = {  # name -> strokes (some drawn anew each time), and width / height
    "dash": (lambda rng: [_lines((0, 0), (1, rng.uniform(-0.08, 0.08)))], 6.0),
    "zigzag": (_zigzag, 2.5),
    "circle with cross": (_circle_with_cross, 1.0),
    "scribble": (_scribble, 1.0),
    "X": (lambda rng: [_lines((0, 0), (1, 1)), _lines((1, 0), (0, 1))], 0.8),
    "W": (lambda rng: [_lines((0, 0), (0.25, 1), (0.5, 0.35), (0.75, 1), (1, 0))], 1.3),
    "M": (lambda rng: [_lines((0, 1), (0.1, 0), (0.5, 0.7), (0.9, 0), (1, 1))], 1.1),
    "H": (lambda rng: [_lines((0, 0), (0, 1)), _lines((1, 0), (1, 1)), _lines((0, 0.5), (1, 0.5))], 0.8),
    "A": (lambda rng: [_lines((0, 1), (0.5, 0), (1, 1)), _lines((0.22, 0.6), (0.78, 0.6))], 0.85),
    "K": (lambda rng: [_lines((0, 0), (0, 1)), _lines((0.9, 0), (0, 0.55), (1, 1))], 0.75),
    "hash": (lambda rng: [_lines((0.3, 0), (0.2, 1)), _lines((0.75, 0), (0.65, 1)),
                          _lines((0, 0.33), (1, 0.33)), _lines((0, 0.67), (1, 0.67))], 1.0),
    "star": (_star, 1.0),
    "spiral": (_spiral, 1.0),
    "wave": (_wave, 3.0),
}


def wobble(points: np.ndarray, rng: np.random.Generator, amount: float = 0.02) -> np.ndarray:
    """A smooth random displacement along the stroke (a few low-frequency sines), as a hand's tremor."""
    t = np.linspace(0, 1, len(points))[:, None]
    out = points.copy()
    for _ in range(3):
        freq, phase = rng.uniform(0.5, 2.0), rng.uniform(0, 2 * np.pi, size=2)
        out += amount * rng.uniform(-1, 1, size=2) * np.sin(2 * np.pi * freq * t + phase)
    return out


def dense(points: np.ndarray, step: float = 0.02) -> np.ndarray:
    """The polyline resampled every `step` (so the wobble bends straight segments too)."""
    out = [points[0]]
    for a, b in zip(points[:-1], points[1:], strict=True):
        n = max(1, int(np.linalg.norm(b - a) / step))
        out += [a + (b - a) * k / n for k in range(1, n + 1)]
    return np.asarray(out)


def draw(name: str, rng: np.random.Generator) -> np.ndarray:
    """One drawing of shape `name` as the canvas returns it: (280, 280, 4) uint8 RGBA, white ink on transparent."""
    make, aspect = SHAPES[name]
    strokes = [np.asarray(s, dtype=np.float64) for s in make(rng)]
    every = np.concatenate(strokes)
    lo, hi = every.min(axis=0), every.max(axis=0)
    span = np.maximum(hi - lo, 1e-6)
    s = SUPERSAMPLE
    longest = rng.uniform(120, 240) * s
    size = longest * (np.array([1.0, 1.0 / aspect]) if aspect >= 1 else np.array([aspect, 1.0]))  # (w, h) px
    shear, angle = rng.uniform(-0.3, 0.3), np.radians(rng.uniform(-15, 15))
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    brush = rng.uniform(16, 24) * s
    placed = []
    for stroke in strokes:
        unit = (wobble(dense((stroke - lo) / span), rng) - 0.5) * size  # (P, 2) px about the centre
        unit[:, 0] -= shear * unit[:, 1]
        placed.append(unit @ rot.T)
    every = np.concatenate(placed)
    extent = every.max(axis=0) - every.min(axis=0) + brush
    fit = min(1.0, (CANVAS * s - 2) / extent.max())  # too big after the slant: shrink to fit
    room = np.maximum(CANVAS * s - extent * fit, 0)
    offset = rng.uniform(0, 1, 2) * room - every.min(axis=0) * fit + brush / 2 * fit
    img = Image.new("RGBA", (CANVAS * s, CANVAS * s), (0, 0, 0, 0))
    pen = ImageDraw.Draw(img)
    for stroke in placed:
        line = [tuple(p) for p in stroke * fit + offset]
        pen.line(line, fill=(255, 255, 255, 255), width=int(brush * fit), joint="curve")
        r = brush * fit / 2
        for x, y in (line[0], line[-1]):  # round caps, like the canvas's brush
            pen.ellipse([x - r, y - r, x + r, y + r], fill=(255, 255, 255, 255))
    return np.asarray(img.resize((CANVAS, CANVAS), Image.Resampling.LANCZOS))


def drawing_set(seed: int, per_shape: int, shapes: list[str] | None = None) -> tuple[list[np.ndarray], list[str]]:
    """per_shape drawings of every shape: (canvases, shape names)."""
    rng = np.random.default_rng(seed)
    canvases, names = [], []
    for name in shapes or list(SHAPES):
        for _ in range(per_shape):
            canvases.append(draw(name, rng))
            names.append(name)
    return canvases, names
