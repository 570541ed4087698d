"""A checkpoint ready to classify drawings: probabilities, the row-by-row reading, attribution.

Images go through `model_input` first (`data.canvas.prepare`: the MNIST recipe for a drawn digit).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from brnn_core.checkpoint import Checkpoint, load_checkpoint
from brnn_core.data.canvas import deslant_for, prepare
from brnn_core.inference.explain import integrated_gradients, prefix_probabilities
from brnn_core.model import mode


class Predictor:
    """A checkpoint ready to classify drawings; build once, call `predict` many times."""

    def __init__(self, checkpoint: Checkpoint, device: str | torch.device = "cpu"):
        self.checkpoint = checkpoint
        self.device = torch.device(device)
        self.model = checkpoint.build_model(self.device)
        self.classes = checkpoint.classes
        self.deslant = deslant_for(self.classes)  # a drawn digit is straightened; a drawn shirt is not

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
        """Class probabilities (num_classes,), or None when the canvas is blank."""
        x = self.model_input(image)
        if x is None:
            return None
        with mode(self.model, False):
            logits = self.model(x.unsqueeze(0).to(self.device))  # (1, C)
        return logits.softmax(dim=1)[0].float().cpu().numpy()

    def read_rows(self, image: np.ndarray | torch.Tensor) -> np.ndarray | None:
        """(28, num_classes): row t = class probabilities after reading only rows 0..t (None when blank).

        Each prefix is a shorter sequence read in both directions, as the model reads a whole image, so
        the last row equals `predict(image)`."""
        x = self.model_input(image)
        return None if x is None else prefix_probabilities(self.model, x)

    def attribution(self, image: np.ndarray | torch.Tensor, target: int | None = None) -> np.ndarray | None:
        """(28, 28): how much each pixel of the model's input pushed class `target` (default: the
        predicted one), by integrated gradients from a black image; None when the canvas is blank.

        Runs backward through the LSTM in eval mode with cuDNN off for the call (see brnn_core.inference.explain)."""
        if target is not None and not 0 <= int(target) < len(self.classes):
            raise ValueError(f"target {target} is not a class of this model; use 0 to {len(self.classes) - 1}")
        x = self.model_input(image)
        return None if x is None else integrated_gradients(self.model, x, target)[0]
