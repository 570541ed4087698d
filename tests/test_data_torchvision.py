"""Datasets through torchvision: its classes read (and download, checking md5) the IDX files; KMNIST.

Downloads are tested against a real HTTP server on 127.0.0.1 serving synthetic files, and offline
against a refused localhost proxy: nothing here reaches the internet.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading

import numpy as np
import pytest
import torch
import torchvision.datasets as tvd
from helpers import write_idx_dataset

from brnn_core.config import DATASET_NAMES
from brnn_core.data import loading as data
from brnn_core.data.datasets import DATASETS, IDX_FILES, KMNIST_CLASSES, DatasetError, availability
from brnn_core.data.loading import load_dataset


def test_kmnist_is_a_dataset_with_torchvisions_class_names():
    assert KMNIST_CLASSES == tvd.KMNIST.classes == ["o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"]
    assert DATASETS["kmnist"].classes == KMNIST_CLASSES and "kmnist" in DATASET_NAMES
    assert set(DATASETS) == set(DATASET_NAMES)  # the Train page's picker lists DATASETS


@pytest.mark.parametrize(("name", "tv_class"), [("mnist", tvd.MNIST), ("fashion-mnist", tvd.FashionMNIST),
                                                ("kmnist", tvd.KMNIST)])
def test_files_are_read_by_torchvision(data_dir, name, tv_class):
    folder = f"{tv_class.__name__}/raw"
    written = write_idx_dataset(data_dir, folder=folder, gz=False, seed=3)
    ds = load_dataset(name, data_dir, download=False)
    assert issubclass(data._torchvision_class(name), tv_class)
    plain = tv_class(str(data_dir), train=True)  # torchvision on its own, same folder
    assert torch.equal(ds.train_x, plain.data) and torch.equal(ds.train_y, plain.targets)
    assert torch.equal(ds.test_x, torch.from_numpy(written[IDX_FILES[2]]))
    assert ds.classes == DATASETS[name].classes and ds.source == str(data_dir / folder)


def test_kmnist_in_the_plain_folder_with_mixed_gz_and_plain_files(data_dir):
    written = write_idx_dataset(data_dir, folder="kmnist", gz=True, seed=4)
    for base in IDX_FILES[1::2]:  # the label files unpacked, the image files left as .gz
        gz = data_dir / "kmnist" / f"{base}.gz"
        (data_dir / "kmnist" / base).write_bytes(__import__("gzip").decompress(gz.read_bytes()))
        gz.unlink()
    before = sorted(p.name for p in (data_dir / "kmnist").iterdir())
    ds = load_dataset("kmnist", data_dir, download=False)
    assert ds.classes == KMNIST_CLASSES and ds.source == str(data_dir / "kmnist")
    assert torch.equal(ds.train_x, torch.from_numpy(written[IDX_FILES[0]]))
    assert torch.equal(ds.test_y, torch.from_numpy(written[IDX_FILES[3]].astype(np.int64)))
    assert sorted(p.name for p in (data_dir / "kmnist").iterdir()) == before  # nothing unpacked into the folder


def test_kmnist_offline_fails_cleanly_naming_the_folder_and_files(data_dir, dead_proxy_env):
    assert availability("kmnist", data_dir) == (f"not on disk: downloads 21 MB into {data_dir / 'KMNIST' / 'raw'} "
                                                "(needs internet)")
    mine = write_idx_dataset(data_dir, folder="KMNIST/raw", seed=5)  # three of the four files are the user's
    (data_dir / "KMNIST" / "raw" / f"{IDX_FILES[2]}.gz").unlink()
    kept = {p.name: p.read_bytes() for p in (data_dir / "KMNIST" / "raw").iterdir()}
    assert len(kept) == 3 and mine
    with pytest.raises(DatasetError) as info:
        load_dataset("kmnist", data_dir)
    message = str(info.value)
    assert message.startswith("kmnist is not on disk and could not be downloaded")
    assert str((data_dir / "KMNIST" / "raw").resolve()) in message
    assert all(f"{base}.gz" in message for base in IDX_FILES) and "mnist-sample" in message
    assert "download failed" in message and "refused" in message.lower()
    assert {p.name: p.read_bytes() for p in (data_dir / "KMNIST" / "raw").iterdir()} == kept  # nothing lost


class _Mirror:
    """A real HTTP server on 127.0.0.1 serving a folder, like a dataset mirror."""

    def __init__(self, folder):
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def mirror(tmp_path, monkeypatch, fresh_urllib):
    """Synthetic MNIST .gz files served from 127.0.0.1, with torchvision's md5 table pointed at them."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    served = tmp_path / "served"
    written = write_idx_dataset(served, folder=".", gz=True, seed=6)
    md5 = {f"{base}.gz": hashlib.md5((served / f"{base}.gz").read_bytes()).hexdigest() for base in IDX_FILES}
    monkeypatch.setattr(data._torchvision_class("mnist"), "resources", list(md5.items()))
    server = _Mirror(served)
    monkeypatch.setitem(data._MIRRORS, "mnist", [server.url])
    yield served, written
    server.close()


def test_download_through_torchvision_from_a_local_mirror(data_dir, mirror):
    served, written = mirror
    messages: list[str] = []
    ds = load_dataset("mnist", data_dir, progress=messages.append)
    assert torch.equal(ds.train_x, torch.from_numpy(written[IDX_FILES[0]]))
    assert torch.equal(ds.test_y, torch.from_numpy(written[IDX_FILES[3]].astype(np.int64)))
    raw = data_dir / "MNIST" / "raw"
    assert ds.source == str(raw)
    assert sorted(p.name for p in raw.iterdir()) == sorted([*IDX_FILES, *(f"{b}.gz" for b in IDX_FILES)])
    assert messages[0] == f"downloading mnist (12 MB) into {raw}"
    assert messages[-1] == f"reading mnist from {raw}"


def test_a_download_with_a_wrong_checksum_fails_and_leaves_no_partial_file(data_dir, mirror):
    served, _ = mirror
    bad = served / f"{IDX_FILES[2]}.gz"
    bad.write_bytes(bad.read_bytes()[:-10])  # the mirror serves a damaged file: torchvision's md5 check fails
    with pytest.raises(DatasetError) as info:
        load_dataset("mnist", data_dir)
    assert "download failed" in str(info.value) and "File not found or corrupted" in str(info.value)
    raw = data_dir / "MNIST" / "raw"
    assert f"{IDX_FILES[2]}.gz" not in {p.name for p in raw.iterdir()}  # the damaged download was removed
    assert (raw / f"{IDX_FILES[0]}.gz").is_file()  # the good files stay: a retry only fetches what is missing
