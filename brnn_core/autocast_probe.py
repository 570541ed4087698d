"""Which dtype the recurrent layers really run in under autocast: asked of the kernels, not assumed.

PyTorch's autocast wrapper for cuDNN RNNs may run a bf16 request in fp16, oneDNN runs the CPU LSTM in bf16 only on
CPUs with native bf16, and CPU autocast leaves nn.GRU in fp32; a forward hook on every recurrent module (nn.LSTM,
nn.GRU, nn.RNN) reads the dtype its output came out in.
"""

from __future__ import annotations

import torch
from torch import nn


def lstm_autocast_dtype(device: torch.device | str, dtype: torch.dtype, model: nn.Module | None = None) -> torch.dtype:
    """The dtype of nn.LSTM's output under torch.autocast(device, dtype) on this machine.

    `model`: the model to ask (its first recurrent module's output, from two blank 28x28 digits), else a small
    bidirectional nn.LSTM. Raises what the kernels raise where they refuse the dtype."""
    device = torch.device(device)
    probe = model if model is not None else nn.LSTM(28, 8, batch_first=True, bidirectional=True).to(device)
    seen: list[torch.dtype] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: seen.append(out[0].dtype))
             for m in probe.modules() if isinstance(m, nn.RNNBase)]
    try:
        with torch.no_grad(), torch.autocast(device_type=device.type, dtype=dtype):
            probe(torch.zeros(2, 28, 28, device=device))
    finally:
        for h in hooks:
            h.remove()
    if not seen:
        raise ValueError("the model has no recurrent module (nn.LSTM, nn.GRU, nn.RNN) to ask")
    return seen[0]
