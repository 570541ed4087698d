"""Canvas drawing -> MNIST-style 28x28 image.

MNIST digits are white on black, scaled to fit a 20x20 box (aspect kept, anti-aliased) and
placed in 28x28 with their centre of mass at the centre. A drawn digit must go through the
same steps or the model sees something unlike anything it was trained on. It lives with the
data because the saved drawings (`drawings`) are stored as this recipe made them; the Predictor
uses the same functions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageFilter

BLANK_INK = 0.05  # a canvas whose brightest pixel is under 5% of full white is blank
MIN_INK_PIXELS = 4


def to_grey(image: np.ndarray) -> np.ndarray:
    """Any image array -> float grey in [0, 1], white ink on black.

    RGBA from the canvas: transparent background, so ink = luminance x alpha. An opaque
    picture with a light background (black ink on white paper) is inverted.
    """
    arr = np.asarray(image)
    if arr.dtype == np.bool_:
        arr = arr.astype(np.float32)
    arr = arr.astype(np.float32)
    if arr.size and arr.max() > 1.0:
        arr = arr / 255.0
    if arr.ndim == 3:
        if arr.shape[2] not in (1, 3, 4):
            raise ValueError(f"expected an (H, W), (H, W, 3) or (H, W, 4) image, got shape {arr.shape}")
        rgb = arr[..., :3] if arr.shape[2] >= 3 else np.repeat(arr[..., :1], 3, axis=2)
        lum = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        grey = lum * arr[..., 3] if arr.shape[2] == 4 else lum
    elif arr.ndim == 2:
        grey = arr
    else:
        raise ValueError(f"expected an (H, W), (H, W, 3) or (H, W, 4) image, got shape {arr.shape}")
    grey = np.nan_to_num(np.clip(grey, 0.0, 1.0))
    if grey.size == 0:  # a 0x0 canvas (not drawn yet): blank
        return grey
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    # Dark ink on a light background: the border AND most of the picture are light. (A white stroke
    # drawn along every edge of a black canvas makes a light border too, but most pixels stay dark.)
    if border.size and np.median(border) > 0.5 and np.median(grey) > 0.5:
        grey = 1.0 - grey
    return grey


def preprocess(rgba: np.ndarray, *, pen: float = 0.0) -> torch.Tensor | None:
    """Canvas image (H, W, 4) -> (28, 28) float tensor in [0, 1]; None for a blank canvas.

    `pen` softens the stroke edges before the resize, by a Gaussian of that many output pixels, to mimic
    MNIST's anti-aliased pen instead of the canvas's hard brush; 0 (measured best: bench/README.md,
    "Canvas path") leaves the brush as drawn."""
    grey = to_grey(rgba)
    if grey.size == 0 or grey.max() < BLANK_INK or (grey > BLANK_INK).sum() < MIN_INK_PIXELS:
        return None
    rows = np.flatnonzero((grey > BLANK_INK).any(axis=1))
    cols = np.flatnonzero((grey > BLANK_INK).any(axis=0))
    crop = grey[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]  # bounding box of the ink
    h, w = crop.shape
    scale = 20.0 / max(h, w)
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    img = Image.fromarray((crop * 255).astype(np.uint8))
    if pen > 0:
        img = img.filter(ImageFilter.GaussianBlur(radius=pen / scale))
        img = Image.fromarray((np.asarray(img, dtype=np.float32) * 255.0 / max(1, np.asarray(img).max()))
                              .astype(np.uint8))
    img = img.resize((new_w, new_h), Image.Resampling.LANCZOS)
    box = np.zeros((28, 28), dtype=np.float32)
    top, left = (28 - new_h) // 2, (28 - new_w) // 2
    box[top:top + new_h, left:left + new_w] = np.asarray(img, dtype=np.float32) / 255.0
    return torch.from_numpy(center_of_mass_shift(box))


def center_of_mass_shift(img: np.ndarray) -> np.ndarray:
    """Shift (by whole pixels, zero fill) so the centre of mass lands at (14, 14)."""
    total = img.sum()
    if total <= 0:
        return img
    ys, xs = np.indices(img.shape)
    cy, cx = (ys * img).sum() / total, (xs * img).sum() / total
    dy, dx = int(round(14 - cy)), int(round(14 - cx))
    out = np.zeros_like(img)
    src_y = slice(max(0, -dy), min(28, 28 - dy))
    src_x = slice(max(0, -dx), min(28, 28 - dx))
    dst_y = slice(max(0, dy), min(28, 28 + dy))
    dst_x = slice(max(0, dx), min(28, 28 + dx))
    out[dst_y, dst_x] = img[src_y, src_x]
    return out


def prepare(image: np.ndarray | torch.Tensor) -> torch.Tensor | None:
    """A canvas RGBA array or an MNIST-style 28x28 array -> (28, 28) float in [0, 1]."""
    arr = image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if arr.shape == (28, 28):
        was_uint8 = arr.dtype == np.uint8
        arr = np.nan_to_num(arr.astype(np.float32))  # NaN would make every probability NaN
        arr = arr / (255.0 if was_uint8 or arr.max() > 1.0 else 1.0)
        return torch.from_numpy(np.clip(arr, 0.0, 1.0))
    return preprocess(arr)


def load_image(path: Path | str) -> np.ndarray:
    """An image file as an RGBA array (for `predict IMAGE`)."""
    try:
        with Image.open(path) as img:
            return np.asarray(img.convert("RGBA"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such image file") from None
    except (OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"{path}: not a readable image ({exc})") from None
