"""The test-set report of a run: confusion matrix, per-class accuracy, misclassified images, calibration.

Written by the worker when a run finishes (report.json); for a run that stopped early the
dashboard can compute it on demand from a checkpoint. Writing it also calibrates the checkpoint it
evaluated (temperature and distance to the training data, stored in the checkpoint: inference.calibration).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from brnn_core.checkpoint import CheckpointError, load_checkpoint, store_calibration
from brnn_core.data.datasets import DatasetError
from brnn_core.data.loading import load_dataset
from brnn_core.devices import eval_amp
from brnn_core.fileio import atomic_write, atomic_write_json, read_json
from brnn_core.inference import calibration
from brnn_core.runs.rundir import Run
from brnn_core.training.engine import EvalResult, confusion_matrix, evaluate

MISCLASSIFIED_KEPT = 200
THUMBNAILS = "misclassified.npy"  # the first THUMBNAILS_KEPT misclassified images themselves, uint8 (k, 28, 28)
THUMBNAILS_KEPT = 48  # what the Runs page shows: it then needs no dataset loaded (a third of a second)


def write_report(run: Run, test: EvalResult, truth: torch.Tensor, classes: list[str], dataset: str,
                 checkpoint: str = "best.pt", extra: dict | None = None, images: torch.Tensor | None = None,
                 *, data_dir: Path | None = None, device: str | torch.device = "cpu") -> dict:
    """report.json: the misclassified test images are kept by index, most confident mistakes first; with the
    test `images`, the first THUMBNAILS_KEPT of them are also kept as pixels (misclassified.npy).

    The checkpoint is calibrated on the run's own splits (`data_dir`: default, the run's data folder) on
    `device`; the report says how (T, ECE before -> after) or why it is not."""
    wrong = (test.predictions != truth).nonzero().flatten()
    confidence = test.probabilities.max(dim=1).values
    wrong = wrong[confidence[wrong].argsort(descending=True)][:MISCLASSIFIED_KEPT]
    report = {
        "split": "test", "dataset": dataset, "classes": classes, "checkpoint": checkpoint,
        "loss": test.loss, "accuracy": test.accuracy, "size": len(truth),
        "per_class_accuracy": test.per_class,
        "confusion_matrix": confusion_matrix(truth, test.predictions, len(classes)),
        "misclassified": [{"index": int(i), "true": int(truth[i]), "pred": int(test.predictions[i]),
                           "confidence": float(confidence[i])} for i in wrong],
    }
    report["calibration"] = calibrate_checkpoint(run, run.checkpoint_dir / checkpoint, test, truth,
                                                 data_dir=data_dir, device=device)
    report.update(extra or {})  # e.g. my_drawings: held-out accuracy before/after (brnn_core.training.drawing_mix)
    if images is not None:
        pixels = images[wrong[:THUMBNAILS_KEPT].to(images.device)].detach().cpu()
        if pixels.is_floating_point():
            pixels = (pixels * 255).round().clamp(0, 255)
        array = pixels.to(torch.uint8).reshape(-1, 28, 28).numpy()
        atomic_write(run.path / THUMBNAILS, lambda fh: np.save(fh, array))
    atomic_write_json(run.path / "report.json", report)  # after the pixels: a report never names missing ones
    return report


def calibrate_checkpoint(run: Run, path: Path, test: EvalResult, truth: torch.Tensor, *,
                         data_dir: Path | None = None, device: str | torch.device = "cpu") -> dict:
    """Fit the checkpoint's temperature (validation split) and distance (training split), store them in the
    checkpoint, and return the report's "calibration" entry: T, ECE before -> after on validation and test.

    A run whose splits cannot be rebuilt (its dataset gone, a checkpoint not of this format) is reported
    uncalibrated with the reason; its checkpoint is left as it is and predicts with T = 1."""
    folder = data_dir or run.config().get("data_dir")
    try:
        model = load_checkpoint(path).build_model(device)
        data = calibration.fit_data(run.config(), Path(folder or "data"))
        fitted, summary = calibration.calibrate(model, data.val_x, data.val_y, num_classes=test.probabilities.shape[1],
                                                train_x=data.train_x, train_y=data.train_y,
                                                familiar_x=data.stroke_val_x)
        store_calibration(path, fitted.to_dict())
    except (CheckpointError, DatasetError, OSError, KeyError, TypeError, ValueError) as exc:
        return {"calibrated": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
    t = fitted.temperature
    calibrated = (test.probabilities.clamp_min(1e-30).log() / t).softmax(dim=1)  # softmax(logits / T)
    summary["test"] = {"ece_before": calibration.expected_calibration_error(test.probabilities, truth.cpu()),
                       "ece_after": calibration.expected_calibration_error(calibrated, truth.cpu())}
    return {"calibrated": True, "checkpoint": path.name, **summary}


def read_thumbnails(run: Run, count: int) -> np.ndarray | None:
    """The first `count` misclassified images as kept with the report, or None (an older run: load the dataset)."""
    try:
        array = np.load(run.path / THUMBNAILS, allow_pickle=False)
    except (OSError, ValueError):
        return None
    return array[:count] if array.ndim == 3 and len(array) >= count else None


def read_report(run: Run) -> dict | None:
    """report.json, None without one; a damaged one (not an object, or without its accuracy) reads as none."""
    report = read_json(run.path / "report.json")
    return report if isinstance(report, dict) and "accuracy" in report else None


def compute_report(run: Run, data_dir: Path, *, device: str = "cpu") -> dict:
    """Evaluate the run's best (else last) checkpoint on the test set and write report.json."""
    path = run.best_ckpt if run.best_ckpt.is_file() else run.last_ckpt
    ckpt = load_checkpoint(path)
    config = run.config()
    train = config.get("train") or {}
    dataset = config.get("dataset") or train.get("dataset")
    ds = load_dataset(dataset, data_dir, download=False)
    model = ckpt.build_model(device)
    amp = eval_amp(config.get("amp") or train.get("amp"), torch.device(device))
    result = evaluate(model, ds.test_x.to(device), ds.test_y.to(device), num_classes=len(ds.classes), amp=amp)
    return write_report(run, result, ds.test_y, ds.classes, dataset, checkpoint=path.name, images=ds.test_x,
                        data_dir=data_dir, device=device, extra={"amp": amp})
