"""A model's recurrent layers unrolled row by row from its own weights, with PyTorch's equations per cell.

PyTorch's fused modules return h per step but no gates (and an LSTM's c only at the end), and a multi-layer module
returns only its last layer's outputs. Unrolled here, every layer's and direction's quantities are tensors of their
own at every row: the look inside reads them without autograd (inference.internals), and the gradient flow through
time differentiates the loss with respect to each row's h (training.gradient_flow). The equations and gate orders:
LSTM i, f, g, o; GRU r, z, n with `n = tanh(W_in x + b_in + r * (W_hn h + b_hn))` and `h' = (1 - z) * n + z * h`;
RNN `h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`. Exact to nn.LSTM, nn.GRU and nn.RNN (tests/test_internals); no
dropout between layers (what eval mode computes).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from brnn_core.model import PIXEL_MEAN, PIXEL_STD, RecurrentClassifier

# Each cell's quantities, h first (what the next layer and the classifier read).
QUANTITIES = {
    "lstm": ("h", "c", "input", "forget", "candidate", "output"),
    "gru": ("h", "reset", "update", "candidate"),
    "rnn": ("h",),
}
DIRECTIONS = ("forward", "backward")

Steps = dict[str, list[torch.Tensor]]  # quantity -> one (N, H) tensor per row, row order 0..n-1
Layer = dict[str, Steps]  # direction -> its steps


def directions_of(model: RecurrentClassifier) -> tuple[str, ...]:
    """("forward", "backward") for a two-way model, ("forward",) for a one-way one."""
    return DIRECTIONS[:model.cfg.directions]


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


def unroll_direction(model: RecurrentClassifier, layer: int, reverse: bool, x: torch.Tensor) -> Steps:
    """One layer (from 0) and direction over `x` (N, rows, input): each of its cell's quantities at every row."""
    module, cell = model.recurrent, model.cfg.cell
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    w_ih, w_hh = getattr(module, "weight_ih" + suffix), getattr(module, "weight_hh" + suffix)
    b_ih, b_hh = ((getattr(module, "bias_ih" + suffix), getattr(module, "bias_hh" + suffix)) if module.bias
                  else (0.0, 0.0))
    # the input's part of every step at once, (N, blocks*H) per row; unbound, so autograd hands each step's gradient
    # back as one stack instead of filling a zero tensor of every step's size at every step
    pre_input = (x @ w_ih.T + b_ih).unbind(dim=1)
    h = x.new_zeros(len(x), module.hidden_size)
    c = x.new_zeros(len(x), module.hidden_size) if cell == "lstm" else None
    rows, names = x.shape[1], QUANTITIES[cell]
    out: Steps = {name: [None] * rows for name in names}
    for t in (range(rows - 1, -1, -1) if reverse else range(rows)):
        h, c, values = STEPS[cell](pre_input[t], h, c, w_hh, b_hh)
        for name, value in zip(names, values, strict=True):
            out[name][t] = value
    return out


def model_input(model: RecurrentClassifier, images: torch.Tensor) -> torch.Tensor:
    """(N, T, 28) images in [0, 1] as the recurrent layers see them: on the model's device, in fp32, standardised
    when the model standardises."""
    x = images.to(next(model.parameters()).device, torch.float32)
    return (x - PIXEL_MEAN) / PIXEL_STD if model.cfg.input_scale == "standard" else x


def unroll(model: RecurrentClassifier, images: torch.Tensor) -> list[Layer]:
    """layers[l][direction] -> Steps for a batch of (N, T, 28) images in [0, 1]; autograd records it when enabled."""
    x = model_input(model, images)
    layers: list[Layer] = []
    for layer in range(model.cfg.num_layers):
        both = {name: unroll_direction(model, layer, name == "backward", x) for name in directions_of(model)}
        layers.append(both)
        x = torch.cat([torch.stack(steps["h"], dim=1) for steps in both.values()], dim=2)  # (N, rows, D*H)
    return layers


def head_features(model: RecurrentClassifier, last: Layer) -> torch.Tensor:
    """(N, D*H) what the model's classifier reads from its last layer `last`, as `RecurrentClassifier.features`
    picks it: bidir, the forward h after the last row and the backward h after the first; last, both at the last
    row (one-way: the forward h alone)."""
    forward = last["forward"]["h"]
    if "backward" not in last:
        return forward[-1]
    backward = last["backward"]["h"]
    return torch.cat([forward[-1], backward[0] if model.cfg.head == "bidir" else backward[-1]], dim=1)
