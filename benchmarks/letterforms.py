"""Letterforms MNIST lacks, drawn as canvas strokes: a test set of our own, and what Teach it does with them.

    .venv/bin/python -m benchmarks.letterforms CKPT [CKPT ...] [--teach] [--preview /tmp/forms.png]

Crossed 7s, open 4s, flagged and European 1s, flat-topped 9s (`FORMS`, pen-stroke templates; the other digits in
common forms) drawn with a round brush after a random size, slant, rotation, position and wobble, scored through
the canvas path. The test set (seeds 1000+) and the teaching set (2000+) are drawn apart; `--teach` runs the
Predict page's fine-tune (`training.teach.teach_config`) on the teaching set and scores the new checkpoint.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from brnn_core.data.drawings import save_drawing
from brnn_core.inference.non_digits import dense, wobble
from brnn_core.inference.predictor import Predictor

ROOT = Path(__file__).resolve().parent.parent

CANVAS, SUPERSAMPLE = 280, 2
TEST_SEED, TEACH_SEED = 1000, 2000
PER_DIGIT_TEST, PER_DIGIT_TEACH = 40, 20


def _arc(cx, cy, rx, ry, a0, a1, n=24):
    t = np.linspace(np.radians(a0), np.radians(a1), n)
    return list(zip(cx + rx * np.cos(t), cy + ry * np.sin(t), strict=True))


# Each form: a list of strokes, each a list of (x, y) in a unit box (y down). Angles: 0 = right, 90 = down.
FORMS: dict[str, tuple[int, list[list[tuple[float, float]]]]] = {
    "zero": (0, [_arc(0.5, 0.5, 0.32, 0.45, -90, 270, 40)]),
    "flagged 1": (1, [[(0.3, 0.28), (0.55, 0.05), (0.55, 0.95)], [(0.32, 0.95), (0.78, 0.95)]]),
    "European 1": (1, [[(0.12, 0.42), (0.6, 0.05), (0.6, 0.95)]]),
    "two": (2, [_arc(0.5, 0.3, 0.3, 0.25, 190, 360) + [(0.78, 0.45), (0.2, 0.95), (0.85, 0.95)]]),
    "three": (3, [_arc(0.48, 0.27, 0.3, 0.22, 200, 450) + _arc(0.48, 0.72, 0.33, 0.24, -90, 160)]),
    "open 4": (4, [[(0.3, 0.05), (0.15, 0.62), (0.88, 0.62)], [(0.68, 0.2), (0.68, 0.97)]]),
    "five": (5, [[(0.8, 0.05), (0.25, 0.05), (0.22, 0.45)] + _arc(0.5, 0.68, 0.32, 0.27, -130, 150)]),
    "six": (6, [[(0.72, 0.05), (0.4, 0.35)] + _arc(0.5, 0.68, 0.28, 0.27, 200, 560)]),
    "crossed 7": (7, [[(0.12, 0.08), (0.88, 0.08), (0.42, 0.95)], [(0.3, 0.5), (0.8, 0.5)]]),
    "eight": (8, [_arc(0.5, 0.27, 0.24, 0.22, 90, 450) + _arc(0.5, 0.72, 0.3, 0.24, -90, 270)]),
    "flat-topped 9": (9, [[(0.78, 0.1), (0.22, 0.1), (0.22, 0.45), (0.78, 0.45)], [(0.78, 0.1), (0.78, 0.95)]]),
}
BY_DIGIT = {d: [name for name, (digit, _) in FORMS.items() if digit == d] for d in range(10)}


def draw(form: str, rng: np.random.Generator) -> np.ndarray:
    """One drawing of `form` as the canvas returns it: (280, 280, 4) uint8 RGBA, white ink on transparent."""
    size = CANVAS * SUPERSAMPLE
    height = rng.uniform(120, 230) * SUPERSAMPLE
    width = height * rng.uniform(0.55, 0.8)
    shear, angle = rng.uniform(-0.3, 0.3), np.radians(rng.uniform(-10, 10))
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    cx = rng.uniform(0.35, 0.65) * size
    cy = rng.uniform(0.4, 0.6) * size
    brush = rng.uniform(16, 24) * SUPERSAMPLE
    img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    pen = ImageDraw.Draw(img)
    for stroke in FORMS[form][1]:
        pts = wobble(dense(np.asarray(stroke, dtype=np.float64)), rng, 0.02)
        xy = np.stack([(pts[:, 0] - 0.5) * width, (pts[:, 1] - 0.5) * height], axis=1)
        xy[:, 0] -= shear * xy[:, 1]  # slant: the top leans right for shear < 0
        xy = xy @ rot.T + [cx, cy]
        line = [tuple(p) for p in xy]
        pen.line(line, fill=(255, 255, 255, 255), width=int(brush), joint="curve")
        for x, y in (line[0], line[-1]):  # round caps, like the canvas's brush
            pen.ellipse([x - brush / 2, y - brush / 2, x + brush / 2, y + brush / 2], fill=(255, 255, 255, 255))
    return np.asarray(img.resize((CANVAS, CANVAS), Image.Resampling.LANCZOS))


def drawing_set(seed: int, per_digit: int) -> tuple[list[np.ndarray], list[int], list[str]]:
    """per_digit drawings of every digit (its forms in turn): (canvases, labels, form names)."""
    rng = np.random.default_rng(seed)
    canvases, labels, names = [], [], []
    for digit in range(10):
        for k in range(per_digit):
            form = BY_DIGIT[digit][k % len(BY_DIGIT[digit])]
            canvases.append(draw(form, rng))
            labels.append(digit)
            names.append(form)
    return canvases, labels, names


def score(checkpoint: Path, canvases, labels, names) -> dict[str, float]:
    """Accuracy overall and per form through the full canvas path."""
    predictor = Predictor.from_checkpoint(checkpoint)
    hits: dict[str, list[bool]] = {}
    for canvas, label, name in zip(canvases, labels, names, strict=True):
        hits.setdefault(name, []).append(int(np.argmax(predictor.predict(canvas))) == label)
    every = [h for v in hits.values() for h in v]
    return {"all": float(np.mean(every)), **{k: float(np.mean(v)) for k, v in hits.items()}}


def teach(checkpoint: Path, canvases, labels, workdir: Path) -> tuple[Path, str]:
    """Save the teaching drawings in a fresh data folder and run Teach it; (new best.pt, its final message)."""
    from brnn_core.runs.rundir import create_run, new_run_config
    from brnn_core.training.teach import teach_config
    from brnn_core.training.worker import train_run_dir

    data_dir = workdir / "data"
    classes = [str(d) for d in range(10)]
    for k, (canvas, label) in enumerate(zip(canvases, labels, strict=True)):
        save_drawing(data_dir, canvas, label, classes, now=1.7e9 + k)
    cfg = teach_config(checkpoint, data_dir)
    run = create_run(workdir / "runs", new_run_config(cfg, data_dir))
    state = train_run_dir(run, data_dir=data_dir)
    if state != "finished":
        raise SystemExit(f"teach run {run.path} ended {state}: {run.status().get('message')}")
    return run.best_ckpt, run.status()["message"]


def preview(path: Path) -> None:
    canvases, _, _ = drawing_set(TEST_SEED, 4)
    tiles = [Image.fromarray(c).convert("LA").resize((70, 70)) for c in canvases]
    sheet = Image.new("L", (70 * 8, 70 * ((len(tiles) + 7) // 8)), 0)
    for i, tile in enumerate(tiles):
        sheet.paste(tile.getchannel("A"), (70 * (i % 8), 70 * (i // 8)))
    sheet.save(path)
    print(f"preview: {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="*", type=Path)
    ap.add_argument("--teach", action="store_true", help="also run Teach it with 20 drawings per digit")
    ap.add_argument("--preview", type=Path, help="write a sheet of drawings to this PNG and exit")
    args = ap.parse_args(argv)
    if args.preview:
        preview(args.preview)
        return 0
    test = drawing_set(TEST_SEED, PER_DIGIT_TEST)
    teaching = drawing_set(TEACH_SEED, PER_DIGIT_TEACH) if args.teach else None
    before, after = [], []
    for ckpt in args.checkpoints:
        s = score(ckpt, *test)
        before.append(s["all"])
        print(f"{ckpt}: letterforms {100 * s['all']:.1f}% "
              + " ".join(f"{k} {100 * v:.0f}%" for k, v in s.items() if k != "all"), flush=True)
        if teaching is not None:
            with tempfile.TemporaryDirectory(prefix="brnn-teach-") as tmp:
                new, message = teach(ckpt, teaching[0], teaching[1], Path(tmp))
                t = score(new, *test)
            after.append(t["all"])
            print(f"  after Teach it: letterforms {100 * t['all']:.1f}% "
                  + " ".join(f"{k} {100 * v:.0f}%" for k, v in t.items() if k != "all") + f"  ({message})", flush=True)
    for what, values in (("letterforms", before), ("after Teach it", after)):
        if len(values) > 1:
            print(f"{what}: mean {100 * statistics.mean(values):.1f}% (sd {100 * statistics.stdev(values):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
