"""The blog's bidirectional LSTM classifier, and `mode()`, the one place a model switches train/eval.

An image is read row by row: 28 steps of 28 pixels. Parameter names (`lstm.*`, `fc.*`)
match the blog script, so its bare `model.ckpt` state_dict loads into this class.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

# "standard": pixels in [0, 1] shifted and scaled by MNIST's mean and spread before the LSTM, so the first
# steps already see inputs of unit size (measured: docs/decisions/009-training-recipe.md);
# "unit": [0, 1] as they are, the blog's, and what every checkpoint from before this setting was trained on.
INPUT_SCALES = ("standard", "unit")
PIXEL_MEAN, PIXEL_STD = 0.1307, 0.3081


@dataclass(frozen=True)
class ModelConfig:
    input_size: int = 28
    hidden_size: int = 128
    num_layers: int = 2
    num_classes: int = 10
    dropout: float = 0.0
    head: str = "bidir"  # "bidir" or "last" (the blog's)
    input_scale: str = "unit"  # a checkpoint without it was trained on [0, 1] inputs

    def to_dict(self) -> dict:
        return asdict(self)


class BiLSTM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.lstm = nn.LSTM(cfg.input_size, cfg.hidden_size, cfg.num_layers, batch_first=True,
                            bidirectional=True, dropout=cfg.dropout if cfg.num_layers > 1 else 0.0)
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.num_classes)
        with torch.no_grad():  # forget gates start open (bias 1): the few hundred steps of a short run learn more
            for name, p in self.lstm.named_parameters():
                if name.startswith("bias_ih"):
                    p[cfg.hidden_size:2 * cfg.hidden_size].fill_(1.0)  # gates in PyTorch's order: i, f, g, o

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        # x: (B, T=28, 28) floats in [0, 1]; zero initial states are nn.LSTM's default.
        if self.cfg.input_scale == "standard":
            x = (x - PIXEL_MEAN) / PIXEL_STD  # (B, T, 28)
        # lengths (B,): read only the first lengths[b] rows of image b, in both directions (the rest is
        # padding the LSTM never sees); None reads all T rows.
        if lengths is None:
            out, _ = self.lstm(x)  # (B, T, 2H): [forward | backward] at every step
            at_end = out[:, -1, :]  # (B, 2H)
        else:
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=x.shape[1])
            at_end = out[torch.arange(len(x), device=x.device), lengths.to(x.device) - 1]  # (B, 2H) at each last row
        if self.cfg.head == "last":
            # (B, 2H) the blog's: the last layer's backward half has run only one step, on the last row
            # (it sees the image only through the layer below)
            feat = at_end
        else:
            h = self.cfg.hidden_size
            # forward state after the last row + backward state after the first row: both full passes
            feat = torch.cat([at_end[:, :h], out[:, 0, h:]], dim=1)  # (B, 2H)
        return self.head(feat)  # (B, num_classes)

    def head(self, feat: torch.Tensor) -> torch.Tensor:
        """The classifier layer, in fp32 even under autocast: bf16 would round the logits, and so the loss's
        gradients, to 8 bits (docs/decisions/016-amp-auto.md). The LSTM is where reduced precision pays."""
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
