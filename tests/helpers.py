"""Plain helper functions for the tests (fixtures live in conftest.py; pytest finds them by itself).

Everything here works on CPU, on temporary folders, with tiny models and real files: the tests never
touch ./runs or ./data and never reach the internet (subprocesses get a refused localhost proxy).
Worker processes get one torch thread: on a small, busy machine two OpenMP threads per process make
a training step many times slower (the threads spin against each other and against other processes).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from brnn_core.config import TrainConfig
from brnn_core.data.datasets import IDX_FILES
from brnn_core.runs.rundir import Run, create_run, list_runs, new_run_config
from brnn_core.states import ACTIVE_STATES
from brnn_core.training.worker import train_run_dir

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "streamlit_app.py"
THREADS = 1  # torch threads in the test process and in every worker it starts (see the module docstring)

# The session's one trained model (conftest's `finished`) and the runs that fine-tune like it: hidden 16 in the
# default 2 layers, one epoch at a constant lr.
SMALL_MODEL = {"hidden_size": 16, "epochs": 1, "lr_schedule": "constant"}

# mnist-sample, the real dataset the training tests use: its 4,500 training digits less TrainConfig's
# val_fraction (0.1) held out for validation leave the images an epoch trains on (test_worker checks this
# against a real run's start event). Every test's count of steps in an epoch comes from here.
SAMPLE_TRAIN_IMAGES = 4050


def steps_per_epoch(batch_size: int | None = None) -> int:
    """Steps in one epoch on mnist-sample at `batch_size` (TrainConfig's default if None); the last batch is
    a partial one."""
    return math.ceil(SAMPLE_TRAIN_IMAGES / (batch_size or TrainConfig().batch_size))


STEPS_PER_EPOCH = steps_per_epoch()  # at the default batch size

# A run that never finishes by itself: a few steps an epoch (TINY_STEPS_PER_EPOCH, so last.pt and best.pt
# are rewritten that often), a metrics row every step, a status rewrite every step.
# Its lr is constant (the blog's recipe): a live lr change is the lr the next step uses, whatever the step.
# It trains in fp32 on every machine, as make_run's runs do (see there).
TINY = {"dataset": "mnist-sample", "device": "cpu", "hidden_size": 8, "num_layers": 1, "batch_size": 512,
        "log_interval": 1, "epochs": 1000, "eval_batch_size": 500, "lr_schedule": "constant", "amp": "off"}
TINY_STEPS_PER_EPOCH = steps_per_epoch(TINY["batch_size"])

# SGD with weight decay 1 at lr 10 multiplies every weight by (1 - lr * wd) = -9 a step: the loss explodes within
# a few steps, whatever the model and data. A real config, no hooks (conftest's `diverged` trains it once).
DIVERGING = {"optimizer": "sgd", "lr": 10.0, "momentum": 0.9, "weight_decay": 1.0}


# ------------------------------------------------------------------ waiting
def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05, *,
             proc: subprocess.Popen | None = None, log: Path | None = None):
    """Poll `predicate()` until it returns something truthy (returned); fail naming `what` after `timeout` s.

    With `proc` (the process that should make it true, e.g. a sweep), fail as soon as it ends first,
    showing the end of its output `log`. Waiting on state instead of sleeping keeps the tests free of
    wall-clock assumptions.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the process ended (exit {proc.returncode}) before {what}:\n{tail(log) if log else ''}")
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def tail(log: Path, n: int = 4000) -> str:
    """The last `n` characters of a process's output file ("" when it cannot be read)."""
    try:
        return Path(log).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def wait_for_state(run: Run, states: str | tuple[str, ...], timeout: float = 120.0) -> dict:
    """The run's status once its state is one of `states`."""
    states = (states,) if isinstance(states, str) else states
    return wait_for(lambda: (s := run.status()).get("state") in states and s,
                    timeout, f"run {run.id} to be {'/'.join(states)} (is {run.status().get('state')})", 0.2)


# ------------------------------------------------------------------ network and environment
def free_port() -> int:
    """A localhost port with nothing listening: connections are refused at once until someone binds it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def refused_proxy() -> str:
    """A proxy URL on a refused localhost port: whatever honours it never reaches the internet."""
    return f"http://127.0.0.1:{free_port()}"


def worker_env(**extra: str) -> dict[str, str]:
    """Environment for `python -m brnn_core` subprocesses: one CPU thread, no GPU, no internet."""
    env = dict(os.environ)
    proxy = refused_proxy()
    env.update(OMP_NUM_THREADS=str(THREADS), MKL_NUM_THREADS=str(THREADS), CUDA_VISIBLE_DEVICES="",
               BRNN_PROGRESS="plain", PYTHONUNBUFFERED="1",
               http_proxy=proxy, https_proxy=proxy, HTTP_PROXY=proxy, HTTPS_PROXY=proxy)
    env.pop("no_proxy", None)
    env.pop("NO_PROXY", None)
    env.update(extra)
    return env


def cli_env(runs_dir: Path, data_dir: Path) -> dict[str, str]:
    """worker_env with the runs and data folders the CLI reads from the environment."""
    return worker_env(BRNN_RUNS_DIR=str(runs_dir), BRNN_DATA_DIR=str(data_dir))


@contextlib.contextmanager
def worker_environ(monkeypatch):
    """Make jobs.spawn_worker (which copies os.environ) start one-thread, offline workers."""
    for key, value in worker_env().items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    for key in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(key, raising=False)
    yield


@contextlib.contextmanager
def torch_threads(n: int = THREADS):
    """torch.set_num_threads(n) for the block, restoring the previous setting."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_cli(args: list[str], runs_dir: Path, data_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m brnn_core ARGS` in a subprocess on these folders; its output captured. A process start and a
    torch import each: keep it for what needs a real process (one per command, exit codes through __main__,
    a worker, a memory limit); the rest uses conftest's `brnn` fixture (cli_in_process)."""
    return subprocess.run([sys.executable, "-m", "brnn_core", *map(str, args)], cwd=REPO,
                          env=cli_env(runs_dir, data_dir), capture_output=True, text=True, timeout=timeout)


def cli_in_process(args: list, runs_dir: Path, data_dir: Path, monkeypatch, capsys) -> subprocess.CompletedProcess:
    """The same as run_cli, in this process: `brnn_core.cli.main(ARGS)` with run_cli's environment (these folders,
    one thread, no internet), its exit code and output in a CompletedProcess. An exception that escapes main fails
    the test with its traceback (a subprocess would have printed one)."""
    from brnn_core.cli import main

    for key, value in cli_env(runs_dir, data_dir).items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    for key in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(key, raising=False)
    capsys.readouterr()  # what the test printed before is not the command's output
    args = [str(a) for a in args]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own errors (exit 2) and --help (exit 0)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["brnn", *args], code, out.out, out.err)


def assert_bad_input(result: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2 with an `error:` message naming each needle, and no traceback (run_cli's or cli_in_process's result)."""
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


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


def write_sample_as_idx(data_dir: Path) -> Path:
    """The real mnist-sample digits written as an IDX `mnist` dataset: workers then load it in milliseconds
    through data.read_idx (mnist-sample itself is parsed from CSV, seconds per worker start)."""
    from brnn_core.data.loading import load_dataset

    ds = load_dataset("mnist-sample")
    arrays = (ds.train_x.numpy(), ds.train_y.numpy(), ds.test_x.numpy(), ds.test_y.numpy())
    for base, array in zip(IDX_FILES, arrays, strict=True):
        write_idx(Path(data_dir) / "MNIST" / "raw" / base, array)
    return Path(data_dir)


# ------------------------------------------------------------------ runs
# Every cell with every head its direction can have: (cell, bidirectional, head)
EVERY_NET = [(cell, two_way, head) for cell in ("lstm", "gru", "rnn")
             for two_way, head in ((True, "bidir"), (True, "last"), (False, "last"))]


def tiny_net(cell: str, bidirectional: bool, head: str, *, seed: int = 0, hidden: int = 10):
    """A fresh two-layer classifier of `cell` (standardised inputs), weights from `seed`."""
    import torch

    from brnn_core.model import ModelConfig, RecurrentClassifier

    torch.manual_seed(seed)
    return RecurrentClassifier(ModelConfig(hidden_size=hidden, num_layers=2, cell=cell, bidirectional=bidirectional,
                                           head=head, input_scale="standard"))


def tiny_config(**overrides) -> TrainConfig:
    """TINY + overrides."""
    return TrainConfig.from_dict({**TINY, **overrides})


def make_run(runs_dir: Path, data_dir: Path | None = None, *, base: dict | None = None, **overrides) -> Run:
    """A complete, queued run directory (no worker started): `base` + overrides.

    base: TrainConfig's defaults on CPU and mnist-sample in fp32 unless given (TINY for a run that is cheap to
    train and never ends by itself): fp32 on every machine, so a test's numbers do not hang on whether the CPU
    runs bf16; the default amp=auto is trained by tests/test_amp_auto.py and test_default_config_learns_mnist_sample.
    """
    cfg = TrainConfig.from_dict({**(base or {"dataset": "mnist-sample", "device": "cpu", "amp": "off"}), **overrides})
    return create_run(runs_dir, new_run_config(cfg, data_dir or runs_dir))


def train_run(runs_dir: Path, data_dir: Path | None = None, **overrides) -> tuple[Run, str]:
    """Create a run (see make_run) and train it in this process; returns it and its final state."""
    run = make_run(runs_dir, data_dir, **overrides)
    return run, train_run_dir(run, data_dir=data_dir or runs_dir)


def stop_at(run: Run, step: int, **stop: str) -> Callable[[str, dict], None]:
    """A train_run_dir printer that sends `stop` (with `stop`'s fields, e.g. a scheduler's source and reason) when
    `step` is logged: the worker applies it before the next step, so with log_interval 1 the run stops at `step`."""

    def printer(kind: str, info: dict) -> None:
        if kind == "log" and info["step"] == step:
            run.send_command("stop", **stop)

    return printer


def fake_finished_run(runs_dir: Path, **overrides) -> Run:
    """A finished-looking run with metrics, events and a real (untrained) checkpoint; no training."""
    from brnn_core.checkpoint import save_checkpoint
    from brnn_core.model import ModelConfig, RecurrentClassifier

    run = make_run(runs_dir, base=TINY, epochs=1, **overrides)
    run.log_metric(step=8, epoch=1.0, split="train", loss=2.2, lr=0.01, samples_per_s=1000.0, elapsed_s=1.0)
    run.log_metric(step=8, epoch=1, split="val", loss=2.1, accuracy=0.3, lr=0.01, elapsed_s=1.2)
    run.log_event("finished", "finished: test accuracy 30.00% (500 images)", step=8)
    save_checkpoint(run.best_ckpt, RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1)),
                    classes=[str(i) for i in range(10)], step=8, epoch=1)
    run.write_status(state="finished", message="finished: test accuracy 30.00% (500 images)", step=8,
                     ended=time.time())
    return run


def assert_no_half_runs(runs_dir: Path) -> list[Run]:
    """The runs in `runs_dir`, after checking that none is half-created or half-deleted."""
    leftovers = [p.name for p in runs_dir.iterdir() if p.name.startswith((".creating-", ".deleting-"))]
    assert not leftovers, leftovers
    runs = list_runs(runs_dir)
    for run in runs:
        assert run.config_path.is_file() and run.status_path.is_file(), run.path
    return runs


def copy_run(run: Run, runs_dir: Path, run_id: str | None = None) -> Run:
    runs_dir.mkdir(parents=True, exist_ok=True)
    target = runs_dir / (run_id or run.id)
    shutil.copytree(run.path, target)
    return Run(target)


def copies_with(run: Run, runs_dir: Path, suffix: str, trains: list[dict]) -> Path:
    """Copies of `run` in `runs_dir`, one per dict of `trains`, each with those train settings changed in its
    config.json (ids 2000010K-000000-mnist-sample-<suffix>0K, oldest first); returns runs_dir."""
    for k, changes in enumerate(trains):
        copy = copy_run(run, runs_dir, f"2000010{k + 1}-000000-mnist-sample-{suffix}0{k}")
        config = json.loads(copy.config_path.read_text())
        config["train"].update(changes)
        copy.config_path.write_text(json.dumps(config))
    return runs_dir


def metric_lines(run: Run) -> list[bytes]:
    """metrics.csv data rows as raw lines (header excluded)."""
    return run.metrics_path.read_bytes().splitlines()[1:]


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under root (relative path -> digest), to prove runs were left untouched."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# ------------------------------------------------------------------ training from the CLI
def start_cli_training(runs_dir: Path, data_dir: Path, *settings: str, log: Path | None = None) -> subprocess.Popen:
    """`python -m brnn_core train --set ...` into runs_dir, in the background (see finish_cli_training)."""
    env = {**os.environ, "BRNN_RUNS_DIR": str(runs_dir), "BRNN_DATA_DIR": str(data_dir), "BRNN_PROGRESS": "plain"}
    args = [a for s in settings for a in ("--set", s)]
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen([sys.executable, "-m", "brnn_core", "train", *args], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        if log:
            out.close()


def finish_cli_training(proc: subprocess.Popen, runs_dir: Path, timeout: float = 900) -> Run:
    """Wait for a start_cli_training process; returns its (finished) run."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    runs = list_runs(runs_dir)
    assert proc.returncode == 0 and len(runs) == 1, f"training failed (exit {proc.returncode}) in {runs_dir}"
    assert runs[0].status()["state"] == "finished", runs[0].status()
    return runs[0]


# ------------------------------------------------------------------ processes
def pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_pid(pid: int | None) -> None:
    """SIGKILL one process this test started (by its id), ignoring one that is already gone."""
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def stop_process(proc: subprocess.Popen | None, timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL after `timeout` s, a process this test started."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def kill_workers(runs_dir: Path) -> None:
    """End every worker process named in the status.json of the runs still active (workers run in their own
    session). An ended run's pid is history: a copy of the session's shared trained run names the test process
    that trained it, which under `make test` may be another worker of this suite, still running."""
    if not Path(runs_dir).is_dir():
        return
    import psutil

    for run in list_runs(runs_dir):
        status = run.stored_status()
        pid = status.get("pid")
        if not pid or int(pid) == os.getpid() or status.get("state") not in ACTIVE_STATES:
            continue
        try:
            proc = psutil.Process(int(pid))
            started = status.get("pid_started")
            if started is not None and abs(proc.create_time() - float(started)) >= 1.0:
                continue  # the pid was reused by someone else's process
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(psutil.TimeoutExpired):
                proc.wait(10)
            if proc.is_running():
                proc.kill()
                proc.wait(10)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError, ValueError):
            continue


# ------------------------------------------------------------------ the dashboard, headless
# Seconds one AppTest script run may take before it fails, for every AppTest the tests build (build_app):
# a page's first run imports torch and plotly, and other jobs share the machine's cores.
APP_TIMEOUT = 180


@functools.cache
def installed_components():
    """Streamlit's registry of the custom components installed here, found once per test process. Each new AppTest
    finds them again on its first run, by reading the metadata of every installed package (a tenth of a second or
    more, hundreds of times in the suite); a server does it once when it starts."""
    from streamlit.components.v2.component_manager import BidiComponentManager

    manager = BidiComponentManager()
    manager.discover_and_register_components(start_file_watching=False)
    return manager


def build_app(page: str | None = None, *, function: Callable | None = None, args: tuple = ()):
    """A new AppTest session, not yet run: of the dashboard (opened on `page`, e.g. "pages/runs.py", if given),
    or of `function` (AppTest.from_function, called with `args`). The pages read their folders from the
    environment (conftest's `dirs`, or app_test)."""
    from streamlit.testing.v1 import AppTest

    if function is not None:
        at = AppTest.from_function(function, args=args, default_timeout=APP_TIMEOUT)
    else:
        at = AppTest.from_file(str(APP), default_timeout=APP_TIMEOUT)
        if page:
            at.switch_page(page)
    at._bidi_component_manager = installed_components()  # AppTest keeps it here (private): filled on a first run
    return at


def app_test(monkeypatch, runs_dir: Path, data_dir: Path | None = None, page: str | None = None):
    """build_app on `runs_dir` and `data_dir` (default: runs_dir's sibling data/), set in the environment."""
    monkeypatch.setenv("BRNN_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("BRNN_DATA_DIR", str(data_dir or runs_dir.parent / "data"))
    return build_app(page)


def texts(elements) -> list[str]:
    return [str(e.value) for e in elements]


def no_exception(at, *context) -> None:
    """Fail with the page's exception messages (and `context`, e.g. the page) if the script raised."""
    assert not at.exception, (*context, texts(at.exception)) if context else texts(at.exception)


def rerun_until(at, predicate, what: str, timeout: float = 60.0):
    """Run an AppTest again until `predicate(at)` holds (work a page left to a background thread, such as
    scoring checkpoints on the saved drawings, shows up on a later rerun)."""
    deadline = time.monotonic() + timeout
    while not predicate(at):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)
        at.run()
    return at


def open_page(page: str, title: str):
    """An AppTest of the dashboard run once on its first page, then switched to `page`, checked by its title."""
    at = build_app()
    at.run()
    at.switch_page(page).run()
    no_exception(at)
    assert at.title[0].value == title
    return at


def walk_runs_and_train_pages(ids: set[str]) -> None:
    """The Runs page (one run a row) lists exactly `ids`, each inspected without an exception, then the Train page
    renders too: how a damaged runs folder is checked from the pages."""
    at = open_page("pages/runs.py", "Runs")
    at.toggle(key="runs_group_seeds").set_value(False).run()  # copies of one run are a seed group: one run a row
    no_exception(at)
    assert set(at.dataframe(key="runs_table").value["run_id"]) == ids
    for run_id in ids:
        at.selectbox(key="inspect").select(run_id).run()
        no_exception(at, run_id)
    at.switch_page("pages/train.py").run()
    no_exception(at)


def save_rendered(data_dir, sample, n: int) -> list:
    """n canvas-like drawings of real training digits (benchmarks/drawn_digits.py's brush), saved with labels."""
    from brnn_core.data.datasets import MNIST_CLASSES
    from brnn_core.data.drawings import save_drawing
    from brnn_core.data.strokes import render

    rng = np.random.default_rng(0)
    return [save_drawing(data_dir, render(sample.train_x[k].numpy(), rng), int(sample.train_y[k]), MNIST_CLASSES,
                         now=1_767_225_600.0 + k) for k in range(n)]
