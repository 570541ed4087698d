"""Inside the LSTM: every layer's and direction's hidden state h, cell state c and four gates at each row.

nn.LSTM returns h at every step but c only at the end and no gates; these are recomputed here from the
model's own weights, step by step, with PyTorch's equations and gate order (i, f, g, o). The forward
direction has read rows 0..t at row t; the backward one rows n-1..t. Exact to nn.LSTM (tests/test_internals).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from brnn_core.model import PIXEL_MEAN, PIXEL_STD, RecurrentClassifier

QUANTITIES = ("h", "c", "input", "forget", "candidate", "output")
DIRECTIONS = ("forward", "backward")


@dataclass(frozen=True)
class Cells:
    """One layer and direction over the rows read: each quantity a (rows, hidden) tensor, row order 0..n-1."""

    h: torch.Tensor
    c: torch.Tensor
    input: torch.Tensor  # i: how much of the candidate enters the cell
    forget: torch.Tensor  # f: how much of the cell is kept
    candidate: torch.Tensor  # g: what would enter (tanh)
    output: torch.Tensor  # o: how much of tanh(c) is shown as h

    def get(self, quantity: str) -> torch.Tensor:
        if quantity not in QUANTITIES:
            raise ValueError(f"unknown quantity {quantity!r}; choose one of {', '.join(QUANTITIES)}")
        return getattr(self, quantity)


@dataclass(frozen=True)
class Internals:
    """layers[l][direction] -> Cells, for the first `rows` rows of one image."""

    layers: tuple[dict[str, Cells], ...]
    rows: int


def _direction(lstm: torch.nn.LSTM, layer: int, reverse: bool, x: torch.Tensor) -> Cells:
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    w_ih, w_hh = getattr(lstm, "weight_ih" + suffix), getattr(lstm, "weight_hh" + suffix)
    bias = getattr(lstm, "bias_ih" + suffix) + getattr(lstm, "bias_hh" + suffix) if lstm.bias else 0.0
    hidden = lstm.hidden_size
    pre_input = x @ w_ih.T + bias  # (N, rows, 4H): the input's part of every step at once
    h = x.new_zeros(len(x), hidden)
    c = x.new_zeros(len(x), hidden)
    rows = x.shape[1]
    out = {name: [None] * rows for name in QUANTITIES}
    for t in (range(rows - 1, -1, -1) if reverse else range(rows)):
        gates = pre_input[:, t] + h @ w_hh.T
        i, f, g, o = gates.split(hidden, dim=1)
        i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
        c = f * c + i * g
        h = o * torch.tanh(c)
        for name, value in zip(QUANTITIES, (h, c, i, f, g, o), strict=True):
            out[name][t] = value
    return Cells(**{name: torch.stack(values, dim=1) for name, values in out.items()})  # each (N, rows, H)


@torch.no_grad()
def batch_internals(model: RecurrentClassifier, images: torch.Tensor) -> tuple[dict[str, Cells], ...]:
    """layers[l][direction] -> Cells of (N, T, H) tensors for a batch of (N, T, 28) images in [0, 1]."""
    lstm = model.lstm
    x = images.to(next(model.parameters()).device, torch.float32)
    if model.cfg.input_scale == "standard":
        x = (x - PIXEL_MEAN) / PIXEL_STD
    layers = []
    for layer in range(lstm.num_layers):
        both = {name: _direction(lstm, layer, name == "backward", x) for name in DIRECTIONS}
        layers.append(both)
        x = torch.cat([both["forward"].h, both["backward"].h], dim=2)  # (N, rows, 2H): the next layer's input
    return tuple(layers)


@torch.no_grad()
def lstm_internals(model: RecurrentClassifier, image: torch.Tensor, rows: int | None = None) -> Internals:
    """The internals of `model` reading the first `rows` (default all) rows of one (T, 28) image in [0, 1],
    as `model(image[None], lengths=[rows])` reads it (eval mode: no dropout between layers)."""
    x = image.to(next(model.parameters()).device, torch.float32)
    rows = len(x) if rows is None else int(rows)
    if not 1 <= rows <= len(x):
        raise ValueError(f"rows must be between 1 and {len(x)}, not {rows}")
    layers = batch_internals(model, x[None, :rows])
    first = tuple({d: Cells(**{q: getattr(cells, q)[0] for q in QUANTITIES}) for d, cells in both.items()}
                  for both in layers)
    return Internals(first, rows)
