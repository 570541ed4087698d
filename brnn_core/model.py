"""The blog's bidirectional LSTM classifier, and nothing else.

An image is read row by row: 28 steps of 28 pixels. Parameter names (`lstm.*`, `fc.*`)
match the blog script, so its bare `model.ckpt` state_dict loads into this class.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    input_size: int = 28
    hidden_size: int = 128
    num_layers: int = 2
    num_classes: int = 10
    dropout: float = 0.0
    head: str = "bidir"  # "bidir" or "last" (the blog's)

    def to_dict(self) -> dict:
        return asdict(self)


class BiLSTM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.lstm = nn.LSTM(cfg.input_size, cfg.hidden_size, cfg.num_layers, batch_first=True,
                            bidirectional=True, dropout=cfg.dropout if cfg.num_layers > 1 else 0.0)
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, T=28, 28) floats in [0, 1]; zero initial states are nn.LSTM's default.
        out, _ = self.lstm(x)  # (B, T, 2H): [forward | backward] at every step
        if self.cfg.head == "last":
            # (B, 2H) the blog's: the last layer's backward half has run only one step, on the last row
            # (it sees the image only through the layer below)
            feat = out[:, -1, :]
        else:
            h = self.cfg.hidden_size
            # forward state after the last row + backward state after the first row: both full passes
            feat = torch.cat([out[:, -1, :h], out[:, 0, h:]], dim=1)  # (B, 2H)
        return self.fc(feat)  # (B, num_classes)
