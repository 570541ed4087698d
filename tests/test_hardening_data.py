"""Hardening: dataset folders with missing, truncated or mismatched IDX files.

Each gives an error that names the file (or, for missing files, the folder and the files to
put there), from data.load_dataset and through the worker: the run ends 'failed' with it.
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
from test_hardening_support import REPO, make_run, torch_threads, worker_env

from brnn_core.data import IDX_FILES, DatasetError, load_dataset, read_idx
from brnn_core.worker import run_training

TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS = IDX_FILES


def idx(array: np.ndarray, magic: bytes | None = None) -> bytes:
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = magic if magic is not None else bytes([0, 0, 0x08, array.ndim])
    return header + b"".join(int(d).to_bytes(4, "big") for d in array.shape) + array.tobytes()


def write_dataset(data_dir: Path, *, gz: bool = False, n_train: int = 40, n_test: int = 20) -> Path:
    folder = data_dir / "MNIST" / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {TRAIN_IMAGES: rng.integers(0, 256, (n_train, 28, 28)), TRAIN_LABELS: rng.integers(0, 10, n_train),
              TEST_IMAGES: rng.integers(0, 256, (n_test, 28, 28)), TEST_LABELS: rng.integers(0, 10, n_test)}
    for base, array in arrays.items():
        blob = idx(array)
        (folder / (base + (".gz" if gz else ""))).write_bytes(gzip.compress(blob) if gz else blob)
    return folder


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
        f(TRAIN_LABELS).write_bytes(idx(np.zeros(39, np.uint8)))
        return TRAIN_LABELS, r"39 labels for 40 images in train-images-idx3-ubyte; the files do not belong together"
    if kind == "swapped":
        images, labels = f(TEST_IMAGES).read_bytes(), f(TEST_LABELS).read_bytes()
        f(TEST_IMAGES).write_bytes(labels)
        f(TEST_LABELS).write_bytes(images)
        return TEST_IMAGES, r"expected 28x28 images, found shape \(20,\)"
    if kind == "wrong-image-size":
        f(TRAIN_IMAGES).write_bytes(idx(np.zeros((40, 20, 20), np.uint8)))
        return TRAIN_IMAGES, r"expected 28x28 images, found shape \(40, 20, 20\)"
    if kind == "bad-label-value":
        f(TEST_LABELS).write_bytes(idx(np.full(20, 12, np.uint8)))
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


def test_missing_file_names_the_folder_and_the_files(tmp_path, monkeypatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, worker_env()["http_proxy"])  # offline: refused at once
    folder = write_dataset(tmp_path / "data")
    (folder / TRAIN_LABELS).unlink()
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", tmp_path / "data", download=False)
    message = str(info.value)
    assert str(folder.resolve()) in message and f"{TRAIN_LABELS}.gz" in message and "mnist-sample" in message
    with pytest.raises(DatasetError, match="download failed"):
        load_dataset("mnist", tmp_path / "data", download=True)


@pytest.mark.parametrize("kind", ["truncated-images", "label-count", "wrong-magic", "missing"])
def test_worker_run_on_a_damaged_dataset_ends_failed_with_the_message(tmp_path, monkeypatch, kind):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, worker_env()["http_proxy"])
    data_dir = tmp_path / "data"
    folder = write_dataset(data_dir)
    if kind == "missing":
        (folder / TEST_IMAGES).unlink()
        name, pattern = "MNIST/raw", r"mnist is not on disk and could not be downloaded"
    else:
        name, pattern = _damage(folder, kind)
    run = make_run(tmp_path / "runs", dataset="mnist", epochs=1)
    with torch_threads(1):
        state = run_training(run, data_dir=data_dir)
    status = run.status()
    assert state == "failed" and status["state"] == "failed", status
    assert name in status["message"] and re.search(pattern, status["message"]), status["message"]
    assert [e["kind"] for e in run.events()][-1] == "error"
    assert not run.last_ckpt.exists()


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
