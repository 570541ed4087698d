"""Training digits drawn as canvas strokes ahead of the first run (brnn_core.data.predraw): the command (a job in
the queue), its marker, the lock that makes a second drawer wait instead of drawing again, and the Train page's
progress."""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
import time

import pytest
from helpers import REPO, build_app, no_exception, worker_env, write_idx_dataset

from brnn_core.config import TrainConfig
from brnn_core.data import as_drawn
from brnn_core.data.loading import load_dataset
from brnn_core.data.predraw import last_progress, marker, needed
from brnn_core.runs import job_queue
from brnn_core.runs.job_queue import JOBS_DIR
from brnn_core.runs.rundir import Run
from ui import warmup

N_TRAIN = 200  # noise images: each is kept as written (too much ink off its skeleton), so drawing is quick
SHARE = TrainConfig().drawn_share


@pytest.fixture
def digits(tmp_path, monkeypatch):
    """A data folder with a small synthetic `mnist` and a cache folder of its own."""
    data_dir, cache = tmp_path / "data", tmp_path / "cache"
    write_idx_dataset(data_dir, n_train=N_TRAIN)
    monkeypatch.setenv("BRNN_CACHE_DIR", str(cache))
    return data_dir


def predraw_process(data_dir) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "brnn_core", "predraw", "mnist", "--data-dir", str(data_dir),
                             "--runs-dir", str(data_dir.parent / "runs")],
                            cwd=REPO, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def drawing_lock(data_dir):
    """The lock file as_drawn takes while it draws mnist's picked digits (the same path it computes)."""
    images = load_dataset("mnist", data_dir).train_x[as_drawn.picked(N_TRAIN, SHARE)].numpy()
    key = hashlib.sha1(images.tobytes()).hexdigest()[:16]
    path = as_drawn.cache_dir(data_dir) / f"as-drawn-v{as_drawn.VERSION}-{key}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path, len(images)


@pytest.mark.worker
def test_the_command_draws_once_and_leaves_a_marker(digits):
    n = len(as_drawn.picked(N_TRAIN, SHARE))
    assert needed("mnist", digits, SHARE)
    first = predraw_process(digits)
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0, out
    assert f"drawing {n} training digits as canvas strokes, once for this dataset: 0/{n}" in out
    assert marker("mnist", SHARE, digits).exists() and not needed("mnist", digits, SHARE)
    again = predraw_process(digits)
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0 and "drawing" not in out, out  # read from the cache
    jobs = [Run(p) for p in (digits.parent / "runs" / JOBS_DIR).iterdir()]
    assert [job.status()["state"] for job in jobs] == ["finished", "finished"]  # each took its turn in the queue


@pytest.mark.worker
def test_the_command_waits_for_the_cpu_like_a_run(digits):
    slot = job_queue.try_take(digits.parent / "runs", "cpu")  # a run trains on the CPU (this process holds it)
    try:
        proc = predraw_process(digits)
        line = proc.stdout.readline()
        assert line.startswith("queued: 1st in line, for cpu (held by another process)"), line
        time.sleep(1.0)
        assert proc.poll() is None and not marker("mnist", SHARE, digits).exists()  # it did not draw meanwhile
    finally:
        slot.release()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and marker("mnist", SHARE, digits).exists(), out


def test_nothing_is_needed_for_clothes_or_a_dataset_that_is_not_on_disk(tmp_path):
    assert not needed("fashion-mnist", tmp_path, SHARE)  # not digits: nothing is redrawn
    assert not needed("mnist", tmp_path / "empty", SHARE)  # never a download in the background
    assert not needed("mnist-sample", tmp_path, 0.0)


@pytest.mark.worker
def test_a_second_drawer_waits_for_the_first_instead_of_drawing_again(digits):
    lock, n = drawing_lock(digits)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a drawer busy with these digits holds it
        proc = predraw_process(digits)
        line = proc.stdout.readline()
        assert line.startswith("waiting for another process that is drawing these training digits"), line
        time.sleep(1.0)
        assert proc.poll() is None  # still waiting: it did not draw meanwhile
    out, _ = proc.communicate(timeout=120)  # the lock is free: it draws (the holder wrote no file)
    assert proc.returncode == 0 and f"0/{n}" in out, out


def test_last_progress_reads_the_newest_line(tmp_path):
    log = tmp_path / "predraw.log"
    assert last_progress(log) is None
    log.write_text("drawing 1,404 training digits as canvas strokes, once for this dataset: 0/1,404\n"
                   "drawing 1,404 training digits as canvas strokes, once for this dataset: 700/1,404\n\n")
    assert last_progress(log)[1:] == (700, 1404)
    log.write_text("waiting for another process that is drawing these training digits as canvas strokes\n")
    assert last_progress(log)[1:] == (0, 0)


@pytest.mark.worker
def test_the_train_page_shows_the_background_drawing_until_it_is_done(digits, tmp_path, monkeypatch):
    """A fresh server's first page starts the drawing; the Train page shows it while it runs, then not."""
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv("BRNN_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("BRNN_DATA_DIR", str(digits))
    lock, _ = drawing_lock(digits)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # keeps the background drawer waiting while the page is looked at
        at = build_app()
        at.run()
        no_exception(at)
        log = warmup.predraw(str(runs_dir), str(digits)).log  # the server's one background drawer (cache_resource)
        deadline = time.time() + 60
        while "waiting" not in (log.read_text() if log.exists() else "") and time.time() < deadline:
            time.sleep(0.2)
        at.run()
        (bar,) = [p for p in at.get("progress") if "ready for its first run" in p.proto.text]
        assert bar.proto.text.startswith("Getting mnist ready for its first run: waiting for another process")
    warmup.predraw(str(runs_dir), str(digits)).proc.wait(timeout=120)
    assert marker("mnist", SHARE, digits).exists()
    at.run()
    assert not [p for p in at.get("progress") if "ready for its first run" in p.proto.text]
