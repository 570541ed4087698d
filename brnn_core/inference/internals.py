"""Inside the network: every layer's and direction's hidden state h, and the cell's own quantities, at each row.

PyTorch's recurrent modules return h per step but no gates (and an LSTM's c only at the end); these are
recomputed here from the model's own weights, step by step, with PyTorch's equations and gate orders: LSTM
i, f, g, o; GRU r, z, n with `n = tanh(W_in x + b_in + r * (W_hn h + b_hn))` and `h' = (1 - z) * n + z * h`;
RNN `h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`. The forward direction has read rows 0..t at row t; the backward
one rows n-1..t. Exact to nn.LSTM, nn.GRU and nn.RNN (tests/test_internals).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from brnn_core.model import PIXEL_MEAN, PIXEL_STD, RecurrentClassifier

# Each cell's quantities, h first (what the next layer and the classifier read).
QUANTITIES = {
    "lstm": ("h", "c", "input", "forget", "candidate", "output"),
    "gru": ("h", "reset", "update", "candidate"),
    "rnn": ("h",),
}
DIRECTIONS = ("forward", "backward")


def directions_of(model: RecurrentClassifier) -> tuple[str, ...]:
    """("forward", "backward") for a two-way model, ("forward",) for a one-way one."""
    return DIRECTIONS[:model.cfg.directions]


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


def _lstm_step(pre: torch.Tensor, h: torch.Tensor, c: torch.Tensor | None, w_hh: torch.Tensor,
               b_hh: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor | None, tuple]:
    i, f, g, o = (pre + h @ w_hh.T + b_hh).chunk(4, dim=1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = f * c + i * g
    h = o * torch.tanh(c)
    return h, c, (h, c, i, f, g, o)


def _gru_step(pre: torch.Tensor, h: torch.Tensor, c: None, w_hh: torch.Tensor,
              b_hh: torch.Tensor | float) -> tuple[torch.Tensor, None, tuple]:
    x_r, x_z, x_n = pre.chunk(3, dim=1)
    h_r, h_z, h_n = (h @ w_hh.T + b_hh).chunk(3, dim=1)  # the recurrent part with its bias: r scales h_n whole
    r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
    n = torch.tanh(x_n + r * h_n)
    h = (1 - z) * n + z * h
    return h, None, (h, r, z, n)


def _rnn_step(pre: torch.Tensor, h: torch.Tensor, c: None, w_hh: torch.Tensor,
              b_hh: torch.Tensor | float) -> tuple[torch.Tensor, None, tuple]:
    h = torch.tanh(pre + h @ w_hh.T + b_hh)
    return h, None, (h,)


STEPS: dict[str, Callable] = {"lstm": _lstm_step, "gru": _gru_step, "rnn": _rnn_step}


def _direction(model: RecurrentClassifier, layer: int, reverse: bool, x: torch.Tensor) -> Cells:
    module, cell = model.recurrent, model.cfg.cell
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    w_ih, w_hh = getattr(module, "weight_ih" + suffix), getattr(module, "weight_hh" + suffix)
    b_ih, b_hh = ((getattr(module, "bias_ih" + suffix), getattr(module, "bias_hh" + suffix)) if module.bias
                  else (0.0, 0.0))
    pre_input = x @ w_ih.T + b_ih  # (N, rows, blocks*H): the input's part of every step at once
    h = x.new_zeros(len(x), module.hidden_size)
    c = x.new_zeros(len(x), module.hidden_size) if cell == "lstm" else None
    rows, names = x.shape[1], QUANTITIES[cell]
    out = {name: [None] * rows for name in names}
    for t in (range(rows - 1, -1, -1) if reverse else range(rows)):
        h, c, values = STEPS[cell](pre_input[:, t], h, c, w_hh, b_hh)
        for name, value in zip(names, values, strict=True):
            out[name][t] = value
    return Cells({name: torch.stack(values, dim=1) for name, values in out.items()})  # each (N, rows, H)


@torch.no_grad()
def batch_internals(model: RecurrentClassifier, images: torch.Tensor) -> tuple[dict[str, Cells], ...]:
    """layers[l][direction] -> Cells of (N, T, H) tensors for a batch of (N, T, 28) images in [0, 1]."""
    x = images.to(next(model.parameters()).device, torch.float32)
    if model.cfg.input_scale == "standard":
        x = (x - PIXEL_MEAN) / PIXEL_STD
    layers = []
    for layer in range(model.cfg.num_layers):
        both = {name: _direction(model, layer, name == "backward", x) for name in directions_of(model)}
        layers.append(both)
        x = torch.cat([cells.h for cells in both.values()], dim=2)  # (N, rows, D*H): the next layer's input
    return tuple(layers)


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
