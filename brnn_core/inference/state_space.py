"""The digit's path through state space, the training digits nearest to it, and LSTMVis-style matches.

`TrainingStates.build` reads a sample of the checkpoint's training digits once: the last layer's h at every
row (each direction the model has), two principal components fitted on the forward h_t, each class's mean path,
and each digit's final state (forward after the last row, backward after the first: what the bidir head reads;
a one-way model's state after the last row). It is
kept beside the checkpoint (`<ckpt>.states.npz`, no pickle) and built in the background, never on a page rerun.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from brnn_core.fileio import atomic_write
from brnn_core.model import PIXEL_MEAN, PIXEL_STD, RecurrentClassifier, mode

SAMPLE = 500  # training digits kept: enough for neighbours and matches, a few MB beside a checkpoint
STATES_SUFFIX = ".states.npz"
VERSION = 2  # bump when what is stored changes: older files are built again


def states_path(checkpoint: Path) -> Path:
    return Path(checkpoint).with_name(Path(checkpoint).name + STATES_SUFFIX)


@dataclass(frozen=True)
class Neighbour:
    index: int  # into the dataset's training split
    label: int
    distance: float


@dataclass(frozen=True)
class TrainingStates:
    indices: np.ndarray  # (N,) into the training split
    labels: np.ndarray  # (N,)
    images: np.ndarray  # (N, T, 28) uint8: the digits themselves, for thumbnails
    h: np.ndarray  # (N, T, D*H) float16: the last layer's [forward | backward] h at every row (D directions)
    final: np.ndarray  # (N, D*H) float32: the states that have read the whole image
    pca_mean: np.ndarray  # (H,)
    pca_axes: np.ndarray  # (2, H)
    class_paths: np.ndarray  # (C, T, 2): each class's mean forward path in the two components

    @classmethod
    @torch.no_grad()
    def build(cls, model: RecurrentClassifier, images: torch.Tensor, labels: torch.Tensor, num_classes: int,
              sample: int = SAMPLE, seed: int = 0) -> TrainingStates:
        """From a dataset's training split `images` (N, T, 28) uint8 and `labels`: `sample` of them, fixed by
        `seed`."""
        rng = np.random.default_rng(seed)
        indices = np.sort(rng.choice(len(images), size=min(sample, len(images)), replace=False))
        x = images[torch.from_numpy(indices)].float() / 255
        h_all = hidden_states(model, x)  # (N, T, D*H)
        hidden = model.cfg.hidden_size
        forward = h_all[:, :, :hidden]
        flat = forward.reshape(-1, hidden)
        mean = flat.mean(dim=0)
        _, _, v = torch.linalg.svd(flat - mean, full_matrices=False)
        axes = v[:2]  # (2, H)
        paths = (forward - mean) @ axes.T  # (N, T, 2)
        y = labels[torch.from_numpy(indices)]
        class_paths = torch.stack([paths[y == c].mean(dim=0) if (y == c).any() else torch.full_like(paths[0], np.nan)
                                   for c in range(num_classes)])
        final = final_state(h_all, hidden)
        return cls(indices, y.numpy(), images[torch.from_numpy(indices)].numpy(), h_all.numpy().astype(np.float16),
                   final.numpy(), mean.numpy(), axes.numpy(), class_paths.numpy())

    def save(self, path: Path) -> None:
        import io

        blob = io.BytesIO()
        np.savez(blob, version=VERSION, **{k: getattr(self, k) for k in self.__dataclass_fields__})
        atomic_write(Path(path), lambda fh: fh.write(blob.getvalue()))

    @classmethod
    def load(cls, path: Path) -> TrainingStates | None:
        """The stored states, None when missing, of another version, or damaged."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if int(data["version"]) != VERSION:
                    return None
                return cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (OSError, ValueError, KeyError):
            return None

    def path_of(self, h: np.ndarray) -> np.ndarray:
        """(T, 2): a digit's forward h_t (T, H) in the two components."""
        return (np.asarray(h, dtype=np.float32) - self.pca_mean) @ self.pca_axes.T

    @property
    def hidden_size(self) -> int:
        return self.pca_mean.shape[0]

    def neighbours(self, final: np.ndarray, k: int = 8) -> list[Neighbour]:
        """The k training digits whose final state is nearest (Euclidean) to `final` (D*H,)."""
        distance = np.linalg.norm(self.final - np.asarray(final, dtype=np.float32), axis=1)
        order = np.argsort(distance, kind="stable")[:k]
        return [Neighbour(int(self.indices[i]), int(self.labels[i]), float(distance[i])) for i in order]

    def matches(self, h: np.ndarray, direction: str, rows: tuple[int, int], threshold: float, k: int = 8,
                theirs: np.ndarray | None = None) -> tuple[np.ndarray, list[tuple[int, int, float]]]:
        """LSTMVis's match: the units whose mean value over `rows` (inclusive) is above `threshold` for the
        drawn digit's values (T, H), and the k training digits whose same units are on there (Jaccard
        similarity of the two sets of on units): (units on, [(index, label, similarity)]). `theirs`: the
        training digits' same quantity (N, T, H) (`activations`); default the last layer's h in `direction`."""
        hidden = self.hidden_size
        if theirs is None:
            theirs = self.h[:, :, slice(0, hidden) if direction == "forward" else slice(hidden, 2 * hidden)]
        a, b = sorted(rows)
        mine = np.asarray(h, dtype=np.float32)[a:b + 1].mean(axis=0)  # (H,)
        means = theirs[:, a:b + 1].astype(np.float32).mean(axis=1)  # (N, H)
        on, theirs = mine > threshold, means > threshold
        union = (theirs | on).sum(axis=1)
        score = np.where(union > 0, (theirs & on).sum(axis=1) / np.maximum(union, 1), 0.0)
        closeness = np.linalg.norm(means - mine, axis=1)  # ties in the on-sets: the closest activity first
        order = np.lexsort((closeness, -score))[:k]
        return np.flatnonzero(on), [(int(self.indices[i]), int(self.labels[i]), float(score[i])) for i in order]


def build_for_checkpoint(checkpoint: Path, data_dir: Path) -> TrainingStates:
    """Build and store the states of `checkpoint` on its dataset's training split (ValueError when it names
    none or the dataset's classes differ from the checkpoint's)."""
    from brnn_core.checkpoint import load_checkpoint
    from brnn_core.data.loading import load_dataset

    ckpt = load_checkpoint(checkpoint)
    dataset = (ckpt.train_config or {}).get("dataset")
    if not dataset:
        raise ValueError(f"{checkpoint} does not say which dataset it was trained on")
    ds = load_dataset(dataset, data_dir, download=False)
    if list(ds.classes) != list(ckpt.classes):
        raise ValueError(f"{checkpoint}'s classes are not {dataset}'s")
    states = TrainingStates.build(ckpt.build_model("cpu"), ds.train_x, ds.train_y, len(ckpt.classes))
    states.save(states_path(checkpoint))
    return states


def activations_path(checkpoint: Path, layer: int, direction: str, quantity: str) -> Path:
    """Where the training digits' `quantity` of `layer` (0-based) and `direction` is kept beside `checkpoint`."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(f"{checkpoint.name}.states-l{layer}-{direction}-{quantity}.npy")


def build_activations(checkpoint: Path, layer: int, direction: str, quantity: str) -> np.ndarray:
    """The stored training digits' (TrainingStates.images) `quantity` (N, T, H), computed from the checkpoint's
    weights (inference.internals) and kept beside it as float16."""
    import io

    from brnn_core.checkpoint import load_checkpoint
    from brnn_core.inference.internals import batch_internals

    states = TrainingStates.load(states_path(checkpoint))
    if states is None:
        raise ValueError(f"{checkpoint} has no training states yet")
    model = load_checkpoint(checkpoint).build_model("cpu").eval()
    cells = batch_internals(model, torch.from_numpy(states.images).float() / 255)[layer][direction]
    values = cells.get(quantity).numpy().astype(np.float16)
    blob = io.BytesIO()
    np.save(blob, values)
    atomic_write(activations_path(checkpoint, layer, direction, quantity), lambda fh: fh.write(blob.getvalue()))
    return values


def load_activations(path: Path) -> np.ndarray | None:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None


@torch.no_grad()
def hidden_states(model: RecurrentClassifier, x: torch.Tensor) -> torch.Tensor:
    """(N, T, D*H): the last layer's h at every row for images (N, T, 28) in [0, 1], as the model reads them."""
    if model.cfg.input_scale == "standard":
        x = (x - PIXEL_MEAN) / PIXEL_STD
    with mode(model, False):
        out, _ = model.recurrent(x.to(next(model.parameters()).device))
    return out.float().cpu()


def final_state(h: torch.Tensor, hidden: int) -> torch.Tensor:
    """(N, D*H): forward h after the last row and, two-way, backward h after the first, from (N, T, D*H)."""
    return torch.cat([h[:, -1, :hidden], h[:, 0, hidden:]], dim=1)  # one-way: the backward part is empty
