"""What each direction drew on: the predicted logit's gradient with respect to the input, split between the readers.

The classifier is linear in what it reads: with a two-way net, logit_c = W_f · h_f + W_b · h_b + b_c, where h_f is
the forward reader's state and h_b the backward one's (the head's two halves; `RecurrentClassifier.features`). So
the gradient of each half with respect to the 28x28 input is the part of the whole gradient that reaches the answer
through that reader, and the parts add up to the whole exactly. A one-way net has one reader and one part; the blog's
`last` head on a two-way net reads the backward state after the last row, and its half is split as it is.

Gradient saliency leans towards the rows each reader read last (Ismail et al. 2019, arXiv:1910.12370): a row read
long ago reaches the answer through many steps, each of which may shrink its gradient. Backward through an
eval-mode recurrent module is refused by cuDNN (the blog's bug), so this runs in eval mode with cuDNN off for the
call (`explain.backward_in_eval`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from brnn_core.inference.explain import backward_in_eval
from brnn_core.model import mode
from brnn_core.unroll import directions_of

UNIT = "logits per unit of ink"  # d logit / d pixel, pixels in [0, 1]; per row: the L2 norm over its 28 pixels


@dataclass(frozen=True)
class DirectionSaliency:
    """The target class's logit gradient (T, 28) with respect to each input pixel, whole and per reader."""

    target: int
    whole: np.ndarray
    parts: dict[str, np.ndarray]  # direction -> the gradient of that reader's half of the logit; they add to whole

    def rows(self) -> dict[str, np.ndarray]:
        """direction -> (T,) how strongly each row's pixels move the logit through that reader: the L2 norm of the
        gradient over the row's pixels (UNIT)."""
        return {name: np.linalg.norm(part, axis=1) for name, part in self.parts.items()}


def direction_saliency(model: nn.Module, x: torch.Tensor, target: int | None = None) -> DirectionSaliency:
    """Split the gradient of class `target`'s logit (default: the predicted class) for one (T, 28) image in [0, 1]
    between the directions that read it."""
    device = next(model.parameters()).device
    inp = x.to(device=device, dtype=torch.float32)[None].requires_grad_(True)  # (1, T, 28)
    hidden = model.cfg.hidden_size
    with torch.enable_grad(), mode(model, False), backward_in_eval():
        feat = model.features(inp)[0]  # (D*H,): [forward | backward] as the head reads them
        if target is None:
            target = int(model.head(feat[None]).argmax())
        weight = model.fc.weight[target]  # (D*H,)
        halves = [feat[k * hidden:(k + 1) * hidden] @ weight[k * hidden:(k + 1) * hidden]
                  for k in range(model.cfg.directions)]
        grads = [torch.autograd.grad(half, inp, retain_graph=True)[0][0] for half in halves]  # (T, 28) each
    parts = {name: grad.detach().float().cpu().numpy() for name, grad in zip(directions_of(model), grads, strict=True)}
    return DirectionSaliency(int(target), sum(parts.values()), parts)
