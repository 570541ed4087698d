"""Honest confidence: temperature scaling's ECE before -> after, and which "not a digit" measure flags what.

    python -m benchmarks.experiments.honest_confidence RUN_DIR [RUN_DIR ...] [--draw-seeds 0] [--limit 8000]
    python -m benchmarks.experiments.honest_confidence --smoke     # one tiny run, a few drawings: the code path only

For each run's best.pt: T fitted on the validation split (brnn_core.inference.calibration), ECE (15 bins)
before/after on validation, the dataset's test split and real MNIST test digits drawn as canvas strokes. Then
three scores (1 - max calibrated probability, energy, Mahalanobis distance of the final states) with thresholds
at quantiles of the validation digits (plain and drawn); flag rates on the drawn test digits and on non-digit
shapes (brnn_core.inference.non_digits): a tuning set (seed 100) and a separate reported set (seed 200).
Decision: docs/decisions/090-honest-confidence.md.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from brnn_core.checkpoint import load_checkpoint
from brnn_core.inference import calibration as cal
from brnn_core.inference.non_digits import SHAPES, drawing_set
from brnn_core.inference.predictor import Predictor
from brnn_core.runs.rundir import Run

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT.parent / "shared" / "data" / "mnist-test-8k.npz"
QUANTILES = (0.95, 0.975, 0.99, 0.995)
TUNE_SEED, REPORT_SEED = 100, 200


def drawn_test(path: Path, limit: int, seed: int, prepare, cache: Path | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `limit` digits of `path` drawn as canvas strokes (seed) and prepared as the Predict page does."""
    from brnn_core.data.strokes import render

    with np.load(path) as z:
        digits, labels = z["images"][:limit].astype(np.uint8), z["labels"][:limit].astype(np.int64)
    file = cache / f"drawn-{path.stem}-{limit}-{seed}.npy" if cache else None
    if file is not None and file.is_file():
        return torch.from_numpy(np.load(file)), torch.from_numpy(labels)
    rng = np.random.default_rng(seed)
    x = torch.stack([prepare(render(d, rng)) for d in digits])  # (N, 28, 28) floats in [0, 1]
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        np.save(file, x.numpy())
    return x, torch.from_numpy(labels)


def scores(logits: torch.Tensor, features: torch.Tensor, t: float, distance: cal.DigitDistance) -> dict:
    """Higher = less like the training data, for each measure."""
    return {"1 - max prob": 1 - (logits / t).softmax(1).max(1).values,
            "energy": -t * torch.logsumexp(logits / t, dim=1),
            "mahalanobis": distance(features)}


def study(run: Run, test_sets: dict, non_digits: dict, data_dir: Path | None) -> dict:
    ckpt = load_checkpoint(run.best_ckpt)
    model = ckpt.build_model("cpu")
    data = cal.fit_data(run.config(), data_dir or Path(run.config().get("data_dir") or "data"))
    calibration, summary = cal.calibrate(model, data.val_x, data.val_y, num_classes=len(ckpt.classes),
                                         train_x=data.train_x, train_y=data.train_y, familiar_x=data.stroke_val_x)
    t, distance = calibration.temperature, calibration.distance
    out = {"T": t, "ece": {"validation": (summary["validation"]["ece_before"], summary["validation"]["ece_after"]),
                           "validation NLL": (summary["validation"]["nll_before"], summary["validation"]["nll_after"])}}
    reference = [cal.features_and_logits(model, x, distance.features) for x in (data.val_x, data.stroke_val_x)]
    parts = [scores(lg, f, t, distance) for f, lg in reference]
    ref_scores = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    out["thresholds"] = {k: {q: float(torch.quantile(v.double(), q)) for q in QUANTILES} for k, v in ref_scores.items()}
    out["flags"] = {}
    for name, (x, y) in {**test_sets, **non_digits}.items():
        f, lg = cal.features_and_logits(model, x, distance.features)
        if y is not None:
            p = lg.softmax(1)
            out["ece"][name] = (cal.expected_calibration_error(p, y),
                                cal.expected_calibration_error((lg / t).softmax(1), y))
            out.setdefault("accuracy", {})[name] = float((p.argmax(1) == y).float().mean())
        s = scores(lg, f, t, distance)
        out["flags"][name] = {k: {q: float((v > out["thresholds"][k][q]).float().mean()) for q in QUANTILES}
                              for k, v in s.items()}
        out.setdefault("scores", {})[name] = s
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--digits", type=Path, default=DIGITS)
    parser.add_argument("--limit", type=int, default=8000)
    parser.add_argument("--draw-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--per-shape", type=int, default=30, help="non-digit drawings per shape in each set")
    parser.add_argument("--data-dir", type=Path, help="default: each run's own data folder")
    parser.add_argument("--cache", type=Path, help="keep the drawn test digits here (drawing 8,000 takes minutes)")
    parser.add_argument("--smoke", action="store_true", help="one tiny run, 50 digits, 2 drawings per shape")
    args = parser.parse_args(argv)
    if args.smoke:
        from brnn_core.config import TrainConfig
        from brnn_core.runs.rundir import create_run, new_run_config
        from brnn_core.training.worker import train_run_dir

        root = Path(tempfile.mkdtemp(prefix="honest-smoke-"))
        run = create_run(root / "runs", new_run_config(TrainConfig.from_dict(
            {"dataset": "mnist-sample", "device": "cpu", "hidden_size": 8, "num_layers": 1, "epochs": 1}), root))
        train_run_dir(run, data_dir=root)
        args.runs, args.limit, args.per_shape = [run.path], 50, 2
    if not args.runs:
        parser.error("give one or more run folders (or --smoke)")
    first = Predictor.from_checkpoint(Run(args.runs[0]).best_ckpt)
    from brnn_core.data.loading import load_dataset

    ds_test = load_dataset(Run(args.runs[0]).config()["dataset"], args.data_dir, download=False)
    test_sets = {"test split": (ds_test.test_x, ds_test.test_y)}
    for seed in args.draw_seeds:
        test_sets[f"drawn test digits (seed {seed})"] = drawn_test(args.digits, args.limit, seed, first.model_input,
                                                                    args.cache)
    non_digits = {}
    for label, seed in (("non-digits, tuning", TUNE_SEED), ("non-digits, reported", REPORT_SEED)):
        canvases, names = drawing_set(seed, args.per_shape)
        non_digits[label] = (torch.stack([first.model_input(c) for c in canvases]), None)
        if label.endswith("reported"):
            shape_names = np.array(names)
    results = [study(Run(path), test_sets, non_digits, args.data_dir) for path in args.runs]
    report(results, args, shape_names)
    return 0


def mean_sd(values: list[float], scale: float = 100.0) -> str:
    m = float(np.mean(values)) * scale
    sd = float(np.std(values, ddof=1)) * scale if len(values) > 1 else math.nan
    return f"{m:.1f} ± {sd:.1f}" if len(values) > 1 else f"{m:.1f}"


def report(results: list[dict], args, shape_names: np.ndarray) -> None:
    print(f"{len(results)} runs: {', '.join(p.name for p in args.runs)}")
    print("T: " + ", ".join(f"{r['T']:.3f}" for r in results))
    print("\n| set | ECE before (%) | ECE after (%) | accuracy (%) |\n| --- | --- | --- | --- |")
    for name in results[0]["ece"]:
        acc = mean_sd([r["accuracy"][name] for r in results]) if name in results[0].get("accuracy", {}) else ""
        scale = 1.0 if "NLL" in name else 100.0
        print(f"| {name} | {mean_sd([r['ece'][name][0] for r in results], scale)} | "
              f"{mean_sd([r['ece'][name][1] for r in results], scale)} | {acc} |")
    print("\nFlagged (%), threshold at a quantile of the validation digits (plain + drawn):\n")
    sets = list(results[0]["flags"])
    print("| measure | quantile | " + " | ".join(sets) + " |\n| --- | --- |" + " --- |" * len(sets))
    for measure in results[0]["thresholds"]:
        for q in QUANTILES:
            cells = [mean_sd([r["flags"][s][measure][q] for r in results]) for s in sets]
            print(f"| {measure} | {q} | " + " | ".join(cells) + " |")
    q = cal.THRESHOLD_QUANTILE
    print(f"\nPer shape (reported set), flagged (%) at quantile {q}:\n")
    measures = list(results[0]["thresholds"])
    print("| shape | " + " | ".join(measures) + " |\n| --- |" + " --- |" * len(measures))
    for shape in SHAPES:
        sel = torch.from_numpy(shape_names == shape)
        cells = [mean_sd([float((r["scores"]["non-digits, reported"][m][sel] > r["thresholds"][m][q]).float().mean())
                          for r in results]) for m in measures]
        print(f"| {shape} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
