"""The user's own saved drawings with their true labels: the `my-drawings` dataset.

Three files per drawing under `<data_dir>/my-drawings/`, the .json written last so that it is what makes a
drawing exist (the format: docs/datasets.md, "My drawings"). One drawing in HOLD_OUT_EVERY of each class is held
out, fixed at saving, so accuracy on those is an honest before/after. A damaged or foreign file is skipped
with a warning; a drawing whose `deslant` differs from the canvas path's has its input.png made again from its
canvas when first read, so every drawing is what the model is shown today.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from brnn_core.data.canvas import deslant_for, preprocess
from brnn_core.fileio import atomic_write, atomic_write_json

FOLDER = "my-drawings"
HOLD_OUT_EVERY, HOLD_OUT_AT = 5, 2  # per class, drawing i (from 0, in saving order) is held out: `is_held_out`
MIN_FOR_ACCURACY = 10  # fewer drawings than this say too little about a checkpoint to show a score
_ID = re.compile(r"^\d{8}-\d{6}-\d{6}-[0-9a-f]{6}$")


class DrawingError(ValueError):
    """A drawing that cannot be saved or deleted; the message says why and what to do."""


@dataclass(frozen=True)
class Drawing:
    id: str
    label: int
    class_name: str
    classes: tuple[str, ...]
    created: float
    held_out: bool
    folder: Path

    @property
    def canvas_path(self) -> Path:
        return self.folder / f"{self.id}.canvas.png"

    @property
    def input_path(self) -> Path:
        return self.folder / f"{self.id}.input.png"

    @property
    def meta_path(self) -> Path:
        return self.folder / f"{self.id}.json"


@dataclass
class Listing:
    """The drawings that could be read, their 28x28 images, and one warning per file skipped."""

    drawings: list[Drawing] = field(default_factory=list)
    images: list[np.ndarray] = field(default_factory=list)  # (28, 28) uint8 each, same order
    warnings: list[str] = field(default_factory=list)


def drawings_dir(data_dir: Path | str) -> Path:
    return Path(data_dir) / FOLDER


def is_held_out(index: int) -> bool:
    """Whether a class's drawing number `index` (counted from 0, in saving order) is held out."""
    return index % HOLD_OUT_EVERY == HOLD_OUT_AT


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 3 -> '3rd', 8 -> '8th', 11 -> '11th', 22 -> '22nd'."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def held_out_ordinals(count: int = 3) -> str:
    """The first `count` held-out drawings of a class, for messages ('3rd, 8th, 13th' for every 5th from the 3rd)."""
    return ", ".join(ordinal(HOLD_OUT_AT + 1 + k * HOLD_OUT_EVERY) for k in range(count))


def save_drawing(data_dir: Path | str, canvas: np.ndarray, label: int, classes: list[str],
                 *, now: float | None = None) -> Drawing:
    """Save a canvas drawing as class `label` of `classes`; refuses a canvas with no ink."""
    classes = [str(c) for c in classes]
    if isinstance(label, bool) or not isinstance(label, int | np.integer) or not 0 <= int(label) < len(classes):
        raise DrawingError(f"label {label!r} is not a class here; use 0 to {len(classes) - 1} "
                           f"({', '.join(classes)})")
    canvas = np.asarray(canvas)
    deslant = deslant_for(classes)
    model_input = preprocess(canvas, deslant=deslant) if canvas.ndim == 3 else None
    if model_input is None:
        raise DrawingError("nothing to save: the canvas has no ink (or is not an RGBA canvas image). "
                           "Draw the digit first, then save it with its label.")
    folder = drawings_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time() if now is None else now
    drawing_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now % 1 * 1e6):06d}-" \
        + secrets.token_hex(3)
    same_class = sum(1 for d in list_drawings(data_dir, classes).drawings if d.label == int(label))
    drawing = Drawing(drawing_id, int(label), classes[int(label)], tuple(classes), now,
                      is_held_out(same_class), folder)
    rgba = np.clip(np.nan_to_num(canvas.astype(np.float32)), 0, 255).astype(np.uint8)
    if rgba.shape[2] != 4:
        rgba = np.asarray(Image.fromarray(rgba[..., :3]).convert("RGBA"))
    _write_png(drawing.canvas_path, Image.fromarray(rgba, "RGBA"))
    _write_png(drawing.input_path, Image.fromarray(to_uint8(model_input), "L"))
    atomic_write_json(drawing.meta_path, {"label": drawing.label, "class_name": drawing.class_name,
                                          "classes": list(classes), "created": now, "held_out": drawing.held_out,
                                          "deslant": deslant})
    return drawing


def to_uint8(image: torch.Tensor | np.ndarray) -> np.ndarray:
    """A [0, 1] float image -> uint8, as the datasets store images."""
    arr = image.numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    return np.clip(np.round(arr * 255.0), 0, 255).astype(np.uint8)


def _write_png(path: Path, img: Image.Image) -> None:
    atomic_write(path, lambda fh: img.save(fh, format="PNG"))


def list_drawings(data_dir: Path | str, classes: list[str] | None = None) -> Listing:
    """Every readable drawing, oldest first (only those labelled with `classes` when given)."""
    listing = Listing()
    folder = drawings_dir(data_dir)
    if not folder.is_dir():
        return listing
    wanted = tuple(str(c) for c in classes) if classes is not None else None
    for meta in sorted(folder.glob("*.json")):
        try:
            drawing, image = _read(meta)
        except (OSError, ValueError, KeyError, TypeError, Image.DecompressionBombError) as exc:
            listing.warnings.append(f"skipped {meta.name}: {exc}")
            continue
        if wanted is None or drawing.classes == wanted:
            listing.drawings.append(drawing)
            listing.images.append(image)
    order = sorted(range(len(listing.drawings)), key=lambda i: listing.drawings[i].created)
    listing.drawings = [listing.drawings[i] for i in order]
    listing.images = [listing.images[i] for i in order]
    return listing


def _read(meta: Path) -> tuple[Drawing, np.ndarray]:
    drawing_id = meta.name.removesuffix(".json")
    if not _ID.match(drawing_id):
        raise ValueError("not a drawing's file name")
    try:
        info = json.loads(meta.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    classes = tuple(str(c) for c in info["classes"])
    label = info["label"]
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(classes):
        raise ValueError(f"label {label!r} is not one of its {len(classes)} classes")
    drawing = Drawing(drawing_id, label, classes[label], classes, float(info["created"]),
                      bool(info.get("held_out", False)), meta.parent)
    with Image.open(drawing.input_path) as img:
        if img.size != (28, 28):
            raise ValueError(f"{drawing.input_path.name} is {img.size[0]}x{img.size[1]}, expected 28x28")
        image = np.asarray(img.convert("L"), dtype=np.uint8)
    if not drawing.canvas_path.is_file():
        raise ValueError(f"{drawing.canvas_path.name} is missing")
    if info.get("deslant", 0.0) != deslant_for(classes):
        image = _remake_input(drawing, info)
    return drawing, image


def _remake_input(drawing: Drawing, info: dict) -> np.ndarray:
    """The model input of a drawing saved under an older canvas path, made again from its canvas and saved
    (input.png, then the .json that says so); kept in memory only when the folder cannot be written."""
    deslant = deslant_for(drawing.classes)
    with Image.open(drawing.canvas_path) as img:
        model_input = preprocess(np.asarray(img.convert("RGBA")), deslant=deslant)
    if model_input is None:
        raise ValueError(f"{drawing.canvas_path.name} has no ink")
    image = to_uint8(model_input)
    with contextlib.suppress(OSError):
        _write_png(drawing.input_path, Image.fromarray(image, "L"))
        atomic_write_json(drawing.meta_path, {**info, "deslant": deslant})
    return image


def delete_drawing(data_dir: Path | str, drawing_id: str) -> None:
    """Remove a drawing's three files (the .json first, so it leaves the list at once)."""
    if not isinstance(drawing_id, str) or not _ID.match(drawing_id):
        raise DrawingError(f"{drawing_id!r} is not a drawing id (like 20250101-120000-000000-a1b2c3)")
    folder = drawings_dir(data_dir)
    meta = folder / f"{drawing_id}.json"
    if not meta.is_file():
        raise DrawingError(f"no drawing {drawing_id} in {folder}; it may have been deleted already")
    meta.unlink()
    for suffix in (".canvas.png", ".input.png"):
        with contextlib.suppress(FileNotFoundError):
            (folder / f"{drawing_id}{suffix}").unlink()


def as_tensors(listing: Listing, held_out: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 28, 28) uint8 images and (N,) int64 labels; only the held-out (True) or training (False) part."""
    keep = [i for i, d in enumerate(listing.drawings) if held_out is None or d.held_out == held_out]
    x = torch.from_numpy(np.stack([listing.images[i] for i in keep])) if keep else torch.zeros(0, 28, 28,
                                                                                               dtype=torch.uint8)
    y = torch.tensor([listing.drawings[i].label for i in keep], dtype=torch.int64)
    return x, y


def drawing_count(data_dir: Path | str) -> int:
    """How many drawings are saved (their metadata files; no image read)."""
    folder = drawings_dir(data_dir)
    try:
        return sum(1 for e in os.scandir(folder) if e.name.endswith(".json") and e.is_file())
    except OSError:
        return 0


def folder_signature(data_dir: Path | str) -> str:
    """Cheap fingerprint of the drawings folder (names, sizes, mtimes; no image read): a cache key."""
    folder = drawings_dir(data_dir)
    try:
        entries = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(folder) if e.is_file())
    except OSError:
        return "none"
    return hashlib.sha1(repr(entries).encode()).hexdigest()[:16]
