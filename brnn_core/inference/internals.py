"""Inside the network: every layer's and direction's hidden state h, and the cell's own quantities, at each row.

PyTorch's recurrent modules return h per step but no gates (and an LSTM's c only at the end); these are
recomputed from the model's own weights, step by step (`brnn_core.unroll`: PyTorch's equations and gate orders,
shared with the gradient flow through time that training records). The forward direction has read rows 0..t at
row t; the backward one rows n-1..t. Exact to nn.LSTM, nn.GRU and nn.RNN (tests/test_internals).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from brnn_core.model import RecurrentClassifier
from brnn_core.unroll import DIRECTIONS, QUANTITIES, directions_of, unroll

__all__ = ["DIRECTIONS", "QUANTITIES", "Cells", "Internals", "batch_internals", "directions_of", "model_internals"]


@dataclass(frozen=True)
class Cells:
    """One layer and direction over the rows read: each of its cell's quantities a (rows, hidden) tensor (or
    (N, rows, hidden) for a batch), row order 0..n-1."""

    values: dict[str, torch.Tensor]

    @property
    def h(self) -> torch.Tensor:
        return self.values["h"]

    @property
    def quantities(self) -> tuple[str, ...]:
        return tuple(self.values)

    def get(self, quantity: str) -> torch.Tensor:
        if quantity not in self.values:
            raise ValueError(f"unknown quantity {quantity!r}; choose one of {', '.join(self.values)}")
        return self.values[quantity]

    def first(self) -> Cells:
        """The first image's of a batch."""
        return Cells({name: value[0] for name, value in self.values.items()})


@dataclass(frozen=True)
class Internals:
    """layers[l][direction] -> Cells, for the first `rows` rows of one image."""

    layers: tuple[dict[str, Cells], ...]
    rows: int

    def final(self) -> torch.Tensor:
        """(D*H,) the last layer's state that has read the whole image in each direction: forward after the last
        row, backward after the first (what the bidir head reads; a one-way net's last-row state)."""
        last = self.layers[-1]
        parts = [last["forward"].h[-1]] + ([last["backward"].h[0]] if "backward" in last else [])
        return torch.cat(parts)


@torch.no_grad()
def batch_internals(model: RecurrentClassifier, images: torch.Tensor) -> tuple[dict[str, Cells], ...]:
    """layers[l][direction] -> Cells of (N, T, H) tensors for a batch of (N, T, 28) images in [0, 1]."""
    return tuple({name: Cells({q: torch.stack(values, dim=1) for q, values in steps.items()})  # each (N, T, H)
                  for name, steps in layer.items()} for layer in unroll(model, images))


@torch.no_grad()
def model_internals(model: RecurrentClassifier, image: torch.Tensor, rows: int | None = None) -> Internals:
    """The internals of `model` reading the first `rows` (default all) rows of one (T, 28) image in [0, 1],
    as `model(image[None], lengths=[rows])` reads it (eval mode: no dropout between layers)."""
    x = image.to(next(model.parameters()).device, torch.float32)
    rows = len(x) if rows is None else int(rows)
    if not 1 <= rows <= len(x):
        raise ValueError(f"rows must be between 1 and {len(x)}, not {rows}")
    layers = batch_internals(model, x[None, :rows])
    return Internals(tuple({d: cells.first() for d, cells in both.items()} for both in layers), rows)
