"""Canvas drawing -> MNIST-style 28x28 image.

MNIST digits are white on black, scaled to fit a 20x20 box (aspect kept, anti-aliased) and placed in 28x28 with
their centre of mass at the centre; a drawing must go through the same steps or the model sees something unlike
its training. A drawn digit is also straightened (`straighten`) most of the way to MNIST's average slant
(docs/decisions/010-canvas-slant-step.md). It lives with the data because the user's saved drawings
(`drawings`) are stored as this recipe made them; the Predictor uses the same functions.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageFilter

from brnn_core.data.datasets import MNIST_CLASSES

BLANK_INK = 0.05  # a canvas whose brightest pixel is under 5% of full white is blank
MIN_INK_PIXELS = 4
# The largest image read, checked before its pixels are decoded or turned into floats (several bytes a pixel
# each): a small PNG of one colour can claim a size whose float copies need gigabytes.
MAX_IMAGE_PIXELS = 4096 * 4096
# Deslanting (docs/decisions/010-canvas-slant-step.md): a drawing's slant is moved DESLANT of the way to
# MNIST_SLANT, the mean slant of mnist-sample's training digits (x per y in image rows: negative = the top
# leans right). All the way (1.0) straightens the digits whose letterform slants (a 7's stem) too far;
# digits only: clothes have no handwriting slant.
DESLANT = 0.75
MNIST_SLANT = -0.138


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


def deslant_for(classes: list[str] | tuple[str, ...]) -> float:
    """How much of a drawing's slant to straighten for a model of these classes: DESLANT for digits, else 0."""
    return DESLANT if [str(c) for c in classes] == MNIST_CLASSES else 0.0


def preprocess(rgba: np.ndarray, *, pen: float = 0.0, deslant: float = 0.0) -> torch.Tensor | None:
    """Canvas image (H, W, 4) -> (28, 28) float tensor in [0, 1]; None for a blank canvas.

    `deslant` (0 to 1) moves the digit's slant that share of the way to MNIST's mean (see `straighten`);
    callers pass `deslant_for(classes)`.

    `pen` softens the stroke edges before the resize, by a Gaussian of that many output pixels, to mimic
    MNIST's anti-aliased pen instead of the canvas's hard brush; 0 (the best of those tried:
    docs/decisions/010-canvas-slant-step.md) leaves the brush as drawn."""
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
    box = center_of_mass_shift(box)
    return torch.from_numpy(straighten(box, deslant) if deslant else box)


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


def slant(img: np.ndarray) -> tuple[float, float, float]:
    """(slant, centre row, centre column) of a 28x28 image from its second moments: the slant is the
    ink's x per y (covariance over the variance of y), negative when the top leans right."""
    total = float(img.sum())
    ys, xs = np.indices(img.shape, dtype=np.float64)
    cy, cx = (ys * img).sum() / total, (xs * img).sum() / total
    var_y = ((ys - cy) ** 2 * img).sum() / total
    return (float(((ys - cy) * (xs - cx) * img).sum() / total / var_y) if var_y > 1.0 else MNIST_SLANT), cy, cx


def straighten(img: np.ndarray, strength: float = DESLANT) -> np.ndarray:
    """Shear a centred 28x28 image horizontally so its slant moves `strength` of the way to MNIST_SLANT, and
    put its centre of mass exactly at (14, 14) (bilinear, zero outside).

    A flat stroke (variance of y under 1 px) has no slant to speak of and is only centred (its slant counts
    as MNIST's); a slant further than 1 from MNIST's mean (45 degrees) is treated as 1, so a scribble is
    never sheared off the image."""
    if img.sum() <= 0:
        return img
    s, cy, cx = slant(img)
    a = strength * float(np.clip(s - MNIST_SLANT, -1.0, 1.0))
    ys, xs = np.indices(img.shape, dtype=np.float64)
    src_y = ys + cy - 14  # each output pixel reads the input here
    src_x = xs + cx - 14 + a * (ys - 14)
    y0, x0 = np.floor(src_y).astype(int), np.floor(src_x).astype(int)
    wy, wx = src_y - y0, src_x - x0
    out = np.zeros(img.shape, dtype=np.float64)
    for dy, dx, w in ((0, 0, (1 - wy) * (1 - wx)), (0, 1, (1 - wy) * wx), (1, 0, wy * (1 - wx)), (1, 1, wy * wx)):
        y, x = y0 + dy, x0 + dx
        inside = (y >= 0) & (y < img.shape[0]) & (x >= 0) & (x < img.shape[1])
        out[inside] += w[inside] * img[y[inside], x[inside]]
    return out.astype(np.float32)


def prepare(image: np.ndarray | torch.Tensor, *, deslant: float = 0.0) -> torch.Tensor | None:
    """A canvas RGBA array or an MNIST-style 28x28 array -> (28, 28) float in [0, 1]. Only a canvas is
    deslanted (`preprocess`): a 28x28 array is taken as MNIST made it."""
    arr = image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    check_pixels(arr.shape[1::-1] if arr.ndim >= 2 else arr.shape, "the image")
    if arr.shape == (28, 28):
        was_uint8 = arr.dtype == np.uint8
        arr = np.nan_to_num(arr.astype(np.float32))  # NaN would make every probability NaN
        arr = arr / (255.0 if was_uint8 or arr.max() > 1.0 else 1.0)
        return torch.from_numpy(np.clip(arr, 0.0, 1.0))
    return preprocess(arr, deslant=deslant)


def load_image(path: Path | str) -> np.ndarray:
    """An image file as an RGBA array (for `predict IMAGE`)."""
    try:
        with warnings.catch_warnings():  # Pillow's bomb warning is for sizes far past MAX_IMAGE_PIXELS, refused next
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(path)  # reads the header only: the size is known before any pixel is decoded
        with img:
            check_pixels(img.size, str(path))
            return np.asarray(img.convert("RGBA"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such image file") from None
    except (OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"{path}: not a readable image ({exc})") from None


def check_pixels(size: tuple[int, ...], name: str) -> None:
    """Raise ValueError when an image of `size` (width, height) is over MAX_IMAGE_PIXELS."""
    pixels = int(np.prod(size, dtype=np.int64)) if len(size) else 0
    if pixels > MAX_IMAGE_PIXELS:
        shown = " x ".join(str(int(d)) for d in size)
        raise ValueError(f"{name}: {shown} pixels is too large to classify (at most {MAX_IMAGE_PIXELS:,} pixels, "
                         f"e.g. 4096 x 4096); crop it to the digit or scale it down")
