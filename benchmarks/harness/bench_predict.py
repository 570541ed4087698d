"""The *predict* rows: a 280x280 RGBA canvas to probabilities with inference.predictor.Predictor, median and p95."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image, ImageDraw

from benchmarks.harness.context import Context, timed
from benchmarks.harness.rows import Row, median, percentile, stat_row
from brnn_core.checkpoint import save_checkpoint
from brnn_core.data.datasets import MNIST_CLASSES
from brnn_core.inference.predictor import Predictor
from brnn_core.model import ModelConfig, RecurrentClassifier


def synthetic_canvas(size: int = 280, stroke: int = 20) -> np.ndarray:
    """A hand-drawn-looking '2' as the dashboard's canvas returns it: (size, size, 4) uint8 RGBA."""
    img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    k = size / 280
    points = [(95, 95), (120, 65), (165, 60), (190, 90), (180, 130), (140, 170), (95, 215), (150, 212), (200, 210)]
    ImageDraw.Draw(img).line([(px * k, py * k) for px, py in points], fill=(255, 255, 255, 255),
                             width=max(1, round(stroke * k)), joint="curve")
    return np.asarray(img).copy()


def bench_predict(ctx: Context) -> list[Row]:
    torch.manual_seed(0)
    path = ctx.workdir / "predict.pt"
    save_checkpoint(path, RecurrentClassifier(ModelConfig()), classes=MNIST_CLASSES)
    canvas = synthetic_canvas()
    calls = ctx.sizes.predict_calls
    devices = [torch.device("cpu")] + ([ctx.device] if ctx.device.type != "cpu" else [])
    rows: list[Row] = []
    for device in devices:
        predictor = Predictor.from_checkpoint(path, device)
        if predictor.predict(canvas) is None:
            raise RuntimeError("the synthetic canvas read as blank")
        x = predictor.model_input(canvas)
        timings: dict[str, list[float]] = {"predict": [], "preprocess": [], "model": []}

        def model_only(x=x, predictor=predictor, device=device):
            with torch.inference_mode():
                predictor.model(x.unsqueeze(0).to(device)).softmax(dim=1).cpu()

        steps = {"predict": lambda predictor=predictor: predictor.predict(canvas),
                 "preprocess": lambda predictor=predictor: predictor.model_input(canvas), "model": model_only}
        for _ in range(max(5, calls // 20)):  # warm-up
            for fn in steps.values():
                fn()
        for _ in range(calls):  # interleaved, so load changes hit all three alike
            for key, fn in steps.items():
                timings[key].append(1000 * timed(device, fn)[1])
        ctx.log(f"predict on {device}: median {median(timings['predict']):.2f} ms")
        where = f"model on {device}"
        p95 = percentile(timings["predict"], 95)
        rows += [
            stat_row("predict", f"Predictor.predict ({where})", "latency median", timings["predict"], "ms",
                     "280x280 RGBA canvas -> probabilities, preprocessing included"),
            Row("predict", f"Predictor.predict ({where})", "latency p95", p95, "ms", reps=calls, target="< 30",
                met="yes" if p95 < 30 else "no"),
            stat_row("predict", "preprocess only (model_input)", "latency median", timings["preprocess"], "ms",
                     "grey, crop, resize to 20, centre of mass, slant"),
            stat_row("predict", f"model only ({where})", "latency median", timings["model"], "ms",
                     "one 28x28 image, batch 1"),
        ]
    return rows


