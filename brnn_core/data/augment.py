"""Training-batch augmentation on the training device: random geometry and stroke thickness per image.

A drawn digit differs from an MNIST digit in slant, size, position and pen width. Each batch is changed in a few
whole-batch ops (one random affine matrix per image through `F.grid_sample`, then a random stroke thickness by
max- or min-pool blending), so it costs little next to the LSTM (docs/decisions/001-augmentation.md). The
generator is seeded by (run seed, global step): a resumed run replays exactly what the interrupted one would
have done. Only `engine.fit` / `train_one_epoch` call this, on training batches; `evaluate` never does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from brnn_core.config import resolve_augment


@dataclass(frozen=True)
class AugmentStrength:
    """Largest change per image; each image draws its own values uniformly within these bounds."""

    rotate_deg: float = 0.0  # rotation in [-rotate_deg, +rotate_deg]
    scale: float = 0.0  # size factor in [1/(1+scale), 1+scale] (log-uniform: shrinking as likely as growing)
    shear_deg: float = 0.0  # horizontal shear (slant) in [-shear_deg, +shear_deg]
    shift_px: float = 0.0  # translation in x and y, in pixels of the 28x28 image
    thickness: float = 0.0  # stroke blend in [-thickness, +thickness]: +1 = a full 3x3 dilation, -1 = erosion
    fraction: float = 1.0  # share of the images changed; the others pass through untouched

    @property
    def geometric(self) -> bool:
        return bool(self.rotate_deg or self.scale or self.shear_deg or self.shift_px)


# Chosen by measurement (docs/decisions/001-augmentation.md). Half of each batch stays
# as it is: changing every image cost accuracy within 5 epochs, changing half of them gained it. The
# thickness blend stays below a full 3x3 min-pool, which wipes out MNIST's 2-3 px strokes.
LEVELS: dict[str, AugmentStrength | None] = {  # the names of config.AUGMENT_LEVELS but "auto"
    "off": None,
    "light": AugmentStrength(rotate_deg=8, scale=0.08, shear_deg=8, shift_px=1.5, thickness=0.4, fraction=0.5),
    "medium": AugmentStrength(rotate_deg=12, scale=0.12, shear_deg=15, shift_px=2.0, thickness=0.6, fraction=0.5),
    "strong": AugmentStrength(rotate_deg=18, scale=0.2, shear_deg=22, shift_px=3.0, thickness=0.8, fraction=0.5),
}

_STEP_SEED_MIX = 0x9E3779B1  # spreads (seed, step) pairs so neighbouring runs' augmentations differ


def step_generator(seed: int, step: int, device: torch.device) -> torch.Generator:
    """The generator for one training step: a pure function of (seed, step), so resume replays it."""
    return torch.Generator(device=device).manual_seed((seed * _STEP_SEED_MIX + step) % (2**63 - 1))


def affine_matrices(n: int, strength: AugmentStrength, generator: torch.Generator,
                    device: torch.device) -> torch.Tensor:
    """(n, 2, 3) matrices for `F.affine_grid`: output pixel -> where to read it in the input.

    Built as the inverse of "scale, shear, rotate, then shift" in affine_grid's [-1, 1] coordinates
    (28 px span 2 units, so a shift of p px is 2p/28)."""
    u = torch.rand(n, 5, generator=generator, device=device) * 2 - 1  # (n, 5) uniform in [-1, 1]
    angle = u[:, 0] * math.radians(strength.rotate_deg)
    size = torch.exp(u[:, 1] * math.log1p(strength.scale))
    shear = torch.tan(u[:, 2] * math.radians(strength.shear_deg))
    shift = u[:, 3:5] * (2 * strength.shift_px / 28)  # (n, 2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    # Forward map A = R(angle) @ Shear @ size*I; the grid needs its inverse A^-1 = I/size @ Shear^-1 @ R^T.
    inv = torch.empty(n, 2, 2, device=device)
    inv[:, 0, 0] = (cos + shear * sin) / size
    inv[:, 0, 1] = (sin - shear * cos) / size
    inv[:, 1, 0] = -sin / size
    inv[:, 1, 1] = cos / size
    offset = -(inv @ shift.unsqueeze(2))  # (n, 2, 1): undo the shift before the inverse linear part
    return torch.cat([inv, offset], dim=2)  # (n, 2, 3)


def sampling_grid(theta: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """`F.affine_grid(theta, (B, 1, H, W), align_corners=False)`, computed as one batched matmul.

    Same numbers; affine_grid's broadcast matmul was the slowest part of a CPU batch
    (docs/decisions/001-augmentation.md)."""
    device = theta.device
    xs = (torch.arange(width, device=device) * 2 + 1) / width - 1  # pixel centres in [-1, 1]
    ys = (torch.arange(height, device=device) * 2 + 1) / height - 1
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")  # (H, W) each
    base = torch.stack([gx, gy, torch.ones_like(gx)], dim=-1)  # (H, W, 3)
    return torch.einsum("bij,hwj->bhwi", theta, base)  # (B, H, W, 2)


def pool3x3(x: torch.Tensor, op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], pad: float) -> torch.Tensor:
    """3x3 stride-1 max-pool (op=torch.maximum) or min-pool (torch.minimum) of (..., H, W), same size.

    Written as shifted maxima over rows, then columns: on the CPU this is over 10x faster than
    `F.max_pool2d(x, 3, 1, 1)` for one-channel 28x28 images (docs/decisions/001-augmentation.md)."""
    p = F.pad(x, (1, 1, 1, 1), value=pad)  # (..., H+2, W+2); pad never wins the max/min
    rows = op(op(p[..., :, :-2], p[..., :, 1:-1]), p[..., :, 2:])  # (..., H+2, W)
    return op(op(rows[..., :-2, :], rows[..., 1:-1, :]), rows[..., 2:, :])  # (..., H, W)


def change_thickness(x: torch.Tensor, amount: torch.Tensor) -> torch.Tensor:
    """Per-image stroke thickness: amount > 0 blends towards a 3x3 dilation, < 0 towards an erosion.

    x: (B, 1, 28, 28) float; amount: (B,) in [-1, 1]."""
    thick = pool3x3(x, torch.maximum, -math.inf)  # max-pool = grey-level dilation
    thin = pool3x3(x, torch.minimum, math.inf)  # min-pool = erosion
    a = amount.view(-1, 1, 1, 1)  # (B, 1, 1, 1)
    target = torch.where(a >= 0, thick, thin)
    return x + a.abs() * (target - x)


def augment_batch(images: torch.Tensor, strength: AugmentStrength | None,
                  generator: torch.Generator) -> torch.Tensor:
    """A randomly changed copy of a batch of (B, 28, 28) images, on their device, in their dtype.

    Float images are expected in [0, 1] (what `batching.to_input` gives); uint8 ones in 0..255."""
    if strength is None or not len(images):
        return images
    device, dtype = images.device, images.dtype
    x = images.float().unsqueeze(1)  # (B, 1, 28, 28)
    if dtype == torch.uint8:
        x = x / 255.0
    n = len(x)
    if strength.geometric:
        theta = affine_matrices(n, strength, generator, device)
        grid = sampling_grid(theta, x.shape[-2], x.shape[-1])  # (B, 28, 28, 2)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    if strength.thickness:
        amount = (torch.rand(n, generator=generator, device=device) * 2 - 1) * strength.thickness
        x = change_thickness(x, amount)
    x = x.squeeze(1)  # (B, 28, 28)
    if strength.fraction < 1:
        keep = torch.rand(n, generator=generator, device=device) >= strength.fraction  # (B,)
        x = torch.where(keep.view(-1, 1, 1), images.float() / 255.0 if dtype == torch.uint8 else images.float(), x)
    if dtype == torch.uint8:
        return (x * 255.0).round_().clamp_(0, 255).to(torch.uint8)
    return x.to(dtype)


class Augmenter:
    """The `augment` callable `engine.fit` applies to each training batch: `augmenter(x, step)`.

    `level()` is read at every step, so a live change of the run's `augment` setting takes effect
    at the next batch, the way `grad_clip` does."""

    def __init__(self, level: Callable[[], str], *, dataset: str, seed: int):
        self.level = level
        self.dataset = dataset
        self.seed = seed

    def strength(self) -> AugmentStrength | None:
        return LEVELS[resolve_augment(self.level(), self.dataset)]

    def __call__(self, images: torch.Tensor, step: int) -> torch.Tensor:
        strength = self.strength()
        if strength is None:
            return images
        return augment_batch(images, strength, step_generator(self.seed, step, images.device))
