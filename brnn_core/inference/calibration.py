"""Honest confidence: calibrated probabilities, and whether an input looks like what the model was trained on.

- Temperature scaling (Guo et al. 2017): one scalar T, fitted on the validation split by minimising the NLL
  of softmax(logits / T); the argmax never changes. Calibration error: ECE over 15 equal-width bins.
- Distance to the training data: the Mahalanobis distance (Lee et al. 2018) of the network's final states and
  the mean and max of its last layer's outputs over the rows to the nearest training class mean under one
  shared covariance. Farther than a quantile of the validation digits' distances (pen-stroke copies in): unfamiliar.
Both are stored in the checkpoint under "calibration"; why this measure: docs/decisions/090-honest-confidence.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from brnn_core.data.batching import to_input
from brnn_core.model import mode

ECE_BINS = 15
T_RANGE = (0.05, 20.0)  # the search interval for T; a fitted T at either end means the logits carry no signal
SHRINKAGE = 0.01  # share of the mean variance added to the covariance's diagonal: invertible with few images
THRESHOLD_QUANTILE = 0.95  # of the in-distribution validation distances (the decision record says why)
POOLED_MAX_HIDDEN = 256  # above it only the final states are used: the stored precision grows as (3 D H)^2
MAX_FIT_IMAGES = 10_000  # training images the class means are fitted on; more changes the means by little
STROKE_REFERENCE = 300  # validation digits given pen-stroke copies when the run trained on none


@dataclass(frozen=True)
class DigitDistance:
    """Mahalanobis distance of a feature vector to the nearest of the training classes' means."""

    means: torch.Tensor  # (C, D)
    precision: torch.Tensor  # (D, D) inverse of the shared within-class covariance
    threshold: float  # a distance above it is unfamiliar
    features: str = "final+pooled"  # which features (FEATURES); D follows from it and the model

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        """(N,) distances of features (N, D)."""
        f = features.to(self.means.dtype)
        diff = f.unsqueeze(1) - self.means.unsqueeze(0)  # (N, C, D)
        squared = torch.einsum("ncd,de,nce->nc", diff, self.precision, diff)  # (N, C)
        return squared.min(dim=1).values.clamp_min(0).sqrt()

    def to_dict(self) -> dict:
        return {"kind": "mahalanobis", "features": self.features, "means": self.means.float().contiguous(),
                "precision": self.precision.float().contiguous(), "threshold": float(self.threshold)}

    @classmethod
    def from_dict(cls, data: object, state_size: int) -> DigitDistance | None:
        """None for anything that is not a usable stored distance (an old, foreign or damaged checkpoint).
        `state_size`: the width of the model's last-layer output (ModelConfig.state_size)."""
        if not isinstance(data, dict) or data.get("kind") != "mahalanobis" or data.get("features") not in FEATURES:
            return None
        means, precision, threshold = data.get("means"), data.get("precision"), data.get("threshold")
        if not (isinstance(means, torch.Tensor) and isinstance(precision, torch.Tensor)
                and isinstance(threshold, int | float) and math.isfinite(threshold)):
            return None
        size = FEATURES[data["features"]] * state_size
        if means.ndim != 2 or means.shape[1] != size or tuple(precision.shape) != (size, size):
            return None
        return cls(means.float(), precision.float(), float(threshold), data["features"])


@dataclass(frozen=True)
class Calibration:
    """What a checkpoint carries to be honest about its confidence."""

    temperature: float
    distance: DigitDistance | None = None

    def to_dict(self) -> dict:
        out: dict = {"temperature": float(self.temperature)}
        if self.distance is not None:
            out["distance"] = self.distance.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: object, state_size: int) -> Calibration | None:
        if not isinstance(data, dict):
            return None
        t = data.get("temperature")
        if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t) or t <= 0:
            return None
        return cls(float(t), DigitDistance.from_dict(data.get("distance"), state_size))


def expected_calibration_error(probs: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS) -> float:
    """ECE: the mean |accuracy - confidence| over equal-width confidence bins, weighted by their share."""
    confidence, predicted = probs.max(dim=1)
    correct = (predicted == labels).float()
    which = (confidence * bins).long().clamp(max=bins - 1)  # (N,) bin of each prediction
    count = torch.bincount(which, minlength=bins).float()
    gap = torch.bincount(which, weights=correct - confidence, minlength=bins)  # summed (accuracy - confidence)
    return float(gap.abs().sum() / count.sum().clamp_min(1))


def nll(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    return float(F.cross_entropy(logits.double() / temperature, labels))


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, iterations: int = 60) -> float:
    """The T in T_RANGE with the lowest NLL of softmax(logits / T): golden-section search on log T.

    The NLL is convex in 1/T, so it has one minimum along log T and the search cannot end in another."""
    lo, hi = math.log(T_RANGE[0]), math.log(T_RANGE[1])
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = nll(logits, labels, math.exp(a)), nll(logits, labels, math.exp(b))
    for _ in range(iterations):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = nll(logits, labels, math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = nll(logits, labels, math.exp(b))
    t = math.exp((lo + hi) / 2)
    return t if nll(logits, labels, t) <= nll(logits, labels, 1.0) else 1.0


FEATURES = {  # name -> feature size in units of the last layer's output width (D*H: directions x hidden)
    "final+pooled": 3,  # what the classifier reads (D*H) + the last layer's outputs' mean and max over rows (D*H each)
    "final": 1,
}


def features_for(hidden_size: int) -> str:
    return "final+pooled" if hidden_size <= POOLED_MAX_HIDDEN else "final"


@torch.inference_mode()
def features_and_logits(model: nn.Module, images: torch.Tensor, features: str = "final+pooled",
                        batch_size: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, D) features (FEATURES[features] x hidden size) and (N, C) logits of whole images.

    `images`: uint8 (N, 28, 28) as datasets hold them, or floats in [0, 1] as `Predictor.model_input` gives."""
    device = next(model.parameters()).device
    seen: dict[str, torch.Tensor] = {}
    hooks = [model.fc.register_forward_hook(lambda _m, inputs, _o: seen.__setitem__("final", inputs[0])),
             model.recurrent.register_forward_hook(lambda _m, _i, output: seen.__setitem__("rows", output[0]))]
    feats, logits = [], []
    try:
        with mode(model, False):
            for i in range(0, len(images), batch_size):
                chunk = images[i:i + batch_size].to(device)
                logits.append(model(to_input(chunk) if chunk.dtype == torch.uint8 else chunk.float()).float())
                parts = [seen["final"]]
                if features == "final+pooled":
                    parts += [seen["rows"].mean(dim=1), seen["rows"].amax(dim=1)]  # (B, 2H) each, over the rows
                feats.append(torch.cat(parts, dim=1).float().cpu())
    finally:
        for hook in hooks:
            hook.remove()
    if not logits:
        size = FEATURES[features] * model.cfg.state_size
        return torch.zeros(0, size), torch.zeros(0, model.fc.out_features)
    return torch.cat(feats), torch.cat(logits).cpu()


def fit_distance(features: torch.Tensor, labels: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(means (C, D), precision (D, D)) of the training features: class means and one shared covariance."""
    f = features.double()
    means = torch.zeros(num_classes, f.shape[1], dtype=torch.float64)
    for c in range(num_classes):
        members = f[labels == c]
        means[c] = members.mean(dim=0) if len(members) else f.mean(dim=0)  # a class absent here: the overall mean
    centred = f - means[labels]
    cov = centred.T @ centred / max(len(f) - 1, 1)  # (D, D)
    cov += SHRINKAGE * cov.diagonal().mean().clamp_min(1e-12) * torch.eye(len(cov), dtype=cov.dtype)
    return means.float(), torch.linalg.inv(cov).float()


def calibrate(model: nn.Module, val_x: torch.Tensor, val_y: torch.Tensor, *, num_classes: int,
              train_x: torch.Tensor | None = None, train_y: torch.Tensor | None = None,
              familiar_x: torch.Tensor | None = None) -> tuple[Calibration, dict]:
    """Fit T on the validation split, and the distance on the training split (when given).

    The distance's threshold is the THRESHOLD_QUANTILE of the validation images' distances together with
    `familiar_x` (e.g. pen-stroke copies of validation digits: in-distribution inputs as users make them).
    Returns the Calibration and a summary for the report (T, validation NLL and ECE before -> after)."""
    kind = features_for(model.cfg.hidden_size)
    val_features, val_logits = features_and_logits(model, val_x, kind)
    val_y = val_y.cpu().long()
    t = fit_temperature(val_logits, val_y)
    summary = {
        "temperature": t, "fitted_on": f"validation split ({len(val_y)} images)", "ece_bins": ECE_BINS,
        "validation": {
            "nll_before": nll(val_logits, val_y, 1.0), "nll_after": nll(val_logits, val_y, t),
            "ece_before": expected_calibration_error(val_logits.softmax(1), val_y),
            "ece_after": expected_calibration_error((val_logits / t).softmax(1), val_y)}}
    distance = None
    if train_x is not None and train_y is not None and len(train_y):
        pick = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(0))[:MAX_FIT_IMAGES]
        train_features, _ = features_and_logits(model, train_x[pick], kind)
        means, precision = fit_distance(train_features, train_y[pick].cpu().long(), num_classes)
        reference = [val_features]
        if familiar_x is not None:
            reference.append(features_and_logits(model, familiar_x, kind)[0])
        distances = DigitDistance(means, precision, math.inf, kind)(torch.cat(reference))
        threshold = float(torch.quantile(distances.double(), THRESHOLD_QUANTILE))
        distance = DigitDistance(means, precision, threshold, kind)
        summary["distance"] = {"kind": "mahalanobis", "features": kind, "threshold": threshold,
                               "quantile": THRESHOLD_QUANTILE,
                               "reference_images": len(distances), "training_images": len(pick)}
    return Calibration(t, distance), summary


@dataclass
class FitData:
    """A run's splits as its model saw them: the training split (pen-stroke copies in), validation, and
    pen-stroke copies of validation digits (None for a dataset that is not digits)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    stroke_val_x: torch.Tensor | None


def fit_data(config: dict, data_dir: Path) -> FitData:
    """Rebuild a run's training and validation splits from its config.json, as the worker's `load_splits` does.

    The pen-stroke copies come from the cache the run itself filled (`as_drawn`); only a digit run trained without
    them has STROKE_REFERENCE of its validation digits drawn here, once (a few seconds), then read from that cache."""
    from brnn_core.config import resolve_drawn_share
    from brnn_core.data import as_drawn
    from brnn_core.data.batching import split_train_val
    from brnn_core.data.loading import load_dataset

    train = config.get("train") or {}
    dataset = config.get("dataset") or train.get("dataset")
    ds = load_dataset(dataset, data_dir, download=False)
    train_idx, val_idx = split_train_val(len(ds.train_y), float(train.get("val_fraction", 0.1)),
                                         int(train.get("seed", 0)))
    train_x, stroke_val = ds.train_x, None
    share = resolve_drawn_share(float(train.get("drawn_share", 0.0)), dataset)  # a run from before it: none
    if share > 0:
        stroke_idx, stroke_copies = as_drawn.drawn_copies(ds.train_x, share, data_dir)
        train_x = ds.train_x.clone()
        train_x[stroke_idx] = stroke_copies
        in_val = torch.zeros(len(ds.train_y), dtype=torch.bool)
        in_val[val_idx] = True
        stroke_val = stroke_copies[in_val[stroke_idx]]
    if (stroke_val is None or not len(stroke_val)) and resolve_drawn_share(1.0, dataset) > 0:
        stroke_val = as_drawn.drawn_cached(ds.train_x[val_idx[:STROKE_REFERENCE]].numpy(), data_dir)
    return FitData(train_x[train_idx], ds.train_y[train_idx], ds.train_x[val_idx], ds.train_y[val_idx], stroke_val)
