"""The recurrent classifier (LSTM, GRU or plain RNN; two-way or one-way), and `mode()`, the one place a model
switches train/eval.

An image is read row by row: 28 steps of 28 pixels. The recurrent module is named after its cell (`lstm.*`,
`gru.*`, `rnn.*`) and the classifier `fc.*`: the LSTM's names match the blog script, so its bare `model.ckpt`
state_dict loads into this class, and a bare state_dict of any cell says which cell it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

# "standard": pixels in [0, 1] shifted and scaled by MNIST's mean and spread before the recurrent layers, so the
# first steps already see inputs of unit size (measured: docs/decisions/009-training-recipe.md);
# "unit": [0, 1] as they are, the blog's, and what every checkpoint from before this setting was trained on.
INPUT_SCALES = ("standard", "unit")
PIXEL_MEAN, PIXEL_STD = 0.1307, 0.3081
# The recurrent cells, each PyTorch's own module; "rnn" is Elman's (tanh). The module's attribute (and so its
# parameters' prefix) is the cell's name: an LSTM's stay `lstm.*`, as in every checkpoint made before the others.
CELLS = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}
CELL_TITLES = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}
GATE_BLOCKS = {"lstm": 4, "gru": 3, "rnn": 1}  # rows of weight_ih per hidden unit: i,f,g,o / r,z,n / one


@dataclass(frozen=True)
class ModelConfig:
    input_size: int = 28
    hidden_size: int = 128
    num_layers: int = 2
    num_classes: int = 10
    dropout: float = 0.0
    head: str = "bidir"  # "bidir" (two-way only) or "last": the state after the last row
    input_scale: str = "unit"  # a checkpoint without it was trained on [0, 1] inputs
    cell: str = "lstm"  # a checkpoint without it is an LSTM
    bidirectional: bool = True  # ... and two-way

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def state_size(self) -> int:
        """Width of one row's output of the last layer: [forward | backward] h, or the forward h alone."""
        return self.directions * self.hidden_size


def network_name(cfg: Any) -> str:
    """What a page calls the network of `cfg` (a ModelConfig or TrainConfig): "two-way LSTM (BiLSTM)",
    "one-way GRU", ..."""
    cell = CELL_TITLES.get(cfg.cell, str(cfg.cell))
    return f"two-way {cell} (Bi{cell})" if cfg.bidirectional else f"one-way {cell}"


class RecurrentClassifier(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        module = CELLS[cfg.cell](cfg.input_size, cfg.hidden_size, cfg.num_layers, batch_first=True,
                                 bidirectional=cfg.bidirectional, dropout=cfg.dropout if cfg.num_layers > 1 else 0.0)
        setattr(self, cfg.cell, module)  # lstm / gru / rnn: the checkpoint's parameter names
        self.fc = nn.Linear(cfg.state_size, cfg.num_classes)
        if cfg.cell == "lstm":
            with torch.no_grad():  # forget gates start open (bias 1): the few hundred steps of a short run learn more
                for name, p in module.named_parameters():
                    if name.startswith("bias_ih"):
                        p[cfg.hidden_size:2 * cfg.hidden_size].fill_(1.0)  # gates in PyTorch's order: i, f, g, o

    @property
    def recurrent(self) -> nn.LSTM | nn.GRU | nn.RNN:
        """The recurrent layers, whichever cell they are."""
        return getattr(self, self.cfg.cell)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        # x: (B, T=28, 28) floats in [0, 1]; zero initial states are PyTorch's default.
        return self.head(self.features(x, lengths))  # (B, num_classes)

    def features(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """(B, D*H) what the classifier reads from images `x` (B, T, 28) in [0, 1]. D = directions."""
        if self.cfg.input_scale == "standard":
            x = (x - PIXEL_MEAN) / PIXEL_STD  # (B, T, 28)
        # lengths (B,): read only the first lengths[b] rows of image b, in every direction (the rest is
        # padding the network never sees); None reads all T rows.
        if lengths is None:
            out, _ = self.recurrent(x)  # (B, T, D*H): [forward | backward] at every step
            at_end = out[:, -1, :]  # (B, D*H)
        else:
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = pad_packed_sequence(self.recurrent(packed)[0], batch_first=True, total_length=x.shape[1])
            at_end = out[torch.arange(len(x), device=x.device), lengths.to(x.device) - 1]  # (B, D*H) at each last row
        if self.cfg.head == "last":
            # (B, D*H) one-way: the only state that has read the whole image. Two-way, the blog's: the last layer's
            # backward half has run only one step, on the last row (it sees the image only through the layer below)
            return at_end
        h = self.cfg.hidden_size
        # forward state after the last row + backward state after the first row: both full passes
        return torch.cat([at_end[:, :h], out[:, 0, h:]], dim=1)  # (B, 2H)

    def head(self, feat: torch.Tensor) -> torch.Tensor:
        """The classifier layer, in fp32 even under autocast: bf16 would round the logits, and so the loss's
        gradients, to 8 bits (docs/decisions/016-amp-auto.md). The recurrent layers are where reduced precision
        pays (CPU autocast runs nn.GRU in fp32 whatever is asked; its output comes out float32)."""
        if not torch.is_autocast_enabled(feat.device.type):
            return self.fc(feat)
        with torch.autocast(feat.device.type, enabled=False):
            return self.fc(feat.float())


# The blog's bug was a model left in eval mode after validating; every switch goes through here and is undone
# on exit, so no caller can leave a model in the wrong mode.
@contextlib.contextmanager
def mode(model: nn.Module, training: bool) -> Iterator[nn.Module]:
    """Put `model` in training or eval mode for the block, then restore its previous mode."""
    previous = model.training
    model.train(training)
    try:
        yield model
    finally:
        model.train(previous)
