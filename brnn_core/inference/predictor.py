"""A checkpoint ready to classify drawings: probabilities, the row-by-row reading, attribution.

Images go through `model_input` first (`data.canvas.prepare`: the MNIST recipe for a drawn digit).
Probabilities are calibrated with the checkpoint's temperature (T = 1 when it carries none), and `assess`
also says whether the input looks like what the model was trained on (`inference.calibration`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from brnn_core.checkpoint import Checkpoint, load_checkpoint
from brnn_core.data.canvas import deslant_for, prepare
from brnn_core.inference.calibration import Calibration, features_and_logits
from brnn_core.inference.explain import integrated_gradients, prefix_probabilities, randomized_copy, row_importance
from brnn_core.inference.internals import Internals, model_internals
from brnn_core.inference.saliency import DirectionSaliency, direction_saliency
from brnn_core.model import mode


@dataclass(frozen=True)
class Assessment:
    """One input's prediction, and how far to trust it."""

    probs: np.ndarray  # (num_classes,), calibrated when `calibrated`
    familiar: bool | None  # False: far from every training class ("does not look like a digit"); None: unknown
    score: float | None  # distance to the nearest training class (None without a fitted distance)
    threshold: float | None  # `score` above it is unfamiliar
    calibrated: bool  # False: the checkpoint carries no temperature, so T = 1
    temperature: float

    @property
    def top(self) -> int:
        return int(np.argmax(self.probs))


class Predictor:
    """A checkpoint ready to classify drawings; build once, call `predict` many times."""

    def __init__(self, checkpoint: Checkpoint, device: str | torch.device = "cpu"):
        self.checkpoint = checkpoint
        self.device = torch.device(device)
        # eval for good: a Predictor never trains, and threads share it (the dashboard's sessions, its explanations'
        # thread); `mode(model, False)` restores the mode it found, so a model left in train mode could be put back
        # into it by one thread while another is still predicting
        self.model = checkpoint.build_model(self.device).eval()
        self.classes = checkpoint.classes
        self.deslant = deslant_for(self.classes)  # a drawn digit is straightened; a drawn shirt is not
        # None for an uploaded or older checkpoint: probabilities as the model gives them (T = 1), "uncalibrated"
        self.calibration = Calibration.from_dict(checkpoint.calibration, checkpoint.model_config.state_size)
        self.temperature = self.calibration.temperature if self.calibration is not None else 1.0
        self._random_twin: torch.nn.Module | None = None  # the sanity check's random-weights copy, made when asked

    @property
    def calibrated(self) -> bool:
        return self.calibration is not None

    @classmethod
    def from_checkpoint(cls, path: Path | str | bytes, device: str | torch.device = "cpu") -> Predictor:
        return cls(load_checkpoint(path), device)

    def model_input(self, image: np.ndarray | torch.Tensor) -> torch.Tensor | None:
        """The (28, 28) image this model is shown for `image` (None when blank): a canvas through the MNIST
        recipe, straightened for a digit model; a 28x28 array as it is. The Predict page shows this image and
        passes it back, so it must come from here rather than from `prepare` with other arguments."""
        return prepare(image, deslant=self.deslant)

    @torch.inference_mode()
    def predict(self, image: np.ndarray | torch.Tensor) -> np.ndarray | None:
        """Calibrated class probabilities (num_classes,), or None when the canvas is blank."""
        x = self.model_input(image)
        if x is None:
            return None
        with mode(self.model, False):
            logits = self.model(x.unsqueeze(0).to(self.device))  # (1, C)
        return (logits.float() / self.temperature).softmax(dim=1)[0].cpu().numpy()

    def assess(self, image: np.ndarray | torch.Tensor) -> Assessment | None:
        """`predict`'s probabilities with whether the input looks like the training images (None when blank)."""
        x = self.model_input(image)
        if x is None:
            return None
        distance = self.calibration.distance if self.calibration is not None else None
        features, logits = features_and_logits(self.model, x.unsqueeze(0), distance.features if distance else "final")
        probs = (logits / self.temperature).softmax(dim=1)[0].numpy()
        if distance is None:
            return Assessment(probs, None, None, None, self.calibrated, self.temperature)
        score = float(distance(features)[0])
        return Assessment(probs, score <= distance.threshold, score, distance.threshold, True, self.temperature)

    def read_rows(self, image: np.ndarray | torch.Tensor) -> np.ndarray | None:
        """(28, num_classes): row t = class probabilities after reading only rows 0..t (None when blank).

        Each prefix is a shorter sequence read in both directions, as the model reads a whole image, so
        the last row equals `predict(image)`."""
        x = self.model_input(image)
        return None if x is None else prefix_probabilities(self.model, x, self.temperature)

    def attribution(self, image: np.ndarray | torch.Tensor, target: int | None = None, *, baseline: str = "black",
                    randomized: bool = False, should_stop: Callable[[], bool] | None = None) -> np.ndarray | None:
        """(28, 28): how much each pixel of the model's input pushed class `target` (default: the
        predicted one), by integrated gradients from `baseline` (explain.BASELINES); None when the canvas is
        blank. `randomized`: the same for a copy of the model with random weights (the sanity check). `should_stop`:
        see explain.integrated_gradients (it raises explain.Stopped).

        Runs backward through the LSTM in eval mode with cuDNN off for the call (see brnn_core.inference.explain)."""
        self._check_target(target)
        x = self.model_input(image)
        if x is None:
            return None
        model = self._randomized() if randomized else self.model
        return integrated_gradients(model, x, target, baseline=baseline, should_stop=should_stop)[0]

    def direction_saliency(self, image: np.ndarray | torch.Tensor,
                           target: int | None = None) -> DirectionSaliency | None:
        """The gradient of class `target`'s logit (default: the predicted class) with respect to the input, split
        between the directions that read it (inference.saliency); None when blank. cuDNN off for the call."""
        self._check_target(target)
        x = self.model_input(image)
        return None if x is None else direction_saliency(self.model, x, target)

    def internals(self, image: np.ndarray | torch.Tensor, rows: int | None = None) -> Internals | None:
        """h, c and the four gates of every layer and direction at each row (inference.internals); None when
        blank."""
        x = self.model_input(image)
        return None if x is None else model_internals(self.model, x, rows)

    def row_importance(self, image: np.ndarray | torch.Tensor, target: int | None = None) -> np.ndarray | None:
        """(28,): the drop in class `target`'s calibrated log-odds (default: the predicted class) when each row
        is blanked in turn (explain.row_importance); None when blank."""
        self._check_target(target)
        x = self.model_input(image)
        if x is None:
            return None
        if target is None:
            target = int(np.argmax(self.predict(x.numpy())))
        return row_importance(self.model, x, int(target), self.temperature)

    def _check_target(self, target: int | None) -> None:
        if target is not None and not 0 <= int(target) < len(self.classes):
            raise ValueError(f"target {target} is not a class of this model; use 0 to {len(self.classes) - 1}")

    def _randomized(self) -> torch.nn.Module:
        if self._random_twin is None:
            self._random_twin = randomized_copy(self.model)
        return self._random_twin
