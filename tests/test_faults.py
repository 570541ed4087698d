"""divergence, a full disk, a read-only runs folder, double Start clicks, a command storm.

Each fault must end in a clear state and message, leave other runs untouched and keep the
dashboard up.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import random
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    TINY,
    app_test,
    fake_finished_run,
    kill_pid,
    kill_workers,
    make_run,
    metric_lines,
    texts,
    tiny_config,
    torch_threads,
    tree_digest,
    wait_for,
    worker_environ,
)

from brnn_core.checkpoint import load_checkpoint
from brnn_core.cli import main
from brnn_core.inference.predictor import Predictor
from brnn_core.runs import jobs
from brnn_core.runs.jobs import JobRegistry
from brnn_core.runs.rundir import Run, RunError, list_runs
from brnn_core.training.worker import run_training


def assert_no_half_runs(runs_dir: Path) -> list[Run]:
    leftovers = [p.name for p in runs_dir.iterdir() if p.name.startswith((".creating-", ".deleting-"))]
    assert not leftovers, leftovers
    runs = list_runs(runs_dir)
    for run in runs:
        assert run.config_path.is_file() and run.status_path.is_file(), run.path
    return runs


# ------------------------------------------------------------------ divergence
@pytest.mark.slow
def test_nan_loss_ends_diverged_with_a_hint_and_a_loadable_last_pt(tmp_path, monkeypatch, idx_data):
    """lr 10 with SGD and weight decay 1: the weights grow x9 a step until the loss is inf/NaN."""
    runs_dir = tmp_path / "runs"
    earlier = fake_finished_run(runs_dir)
    run = make_run(runs_dir, base=TINY, dataset="mnist", optimizer="sgd", lr=10.0, weight_decay=1.0, momentum=0.9,
                   batch_size=100, log_interval=40, epochs=3, input_scale="unit")
    # the blog's inputs, first log after the loss is NaN (step ~33); logged more often, the finite explosion
    # before it ends the run first (tests/test_divergence.py)
    with torch_threads(1):
        state = run_training(run, data_dir=idx_data)
    status = run.status()
    assert state == "diverged" and status["state"] == "diverged", status
    assert "the loss became NaN or infinite" in status["message"]
    assert "Lower the learning rate (now 10)" in status["message"]
    assert any(e["kind"] == "diverged" for e in run.events())
    ckpt = load_checkpoint(run.last_ckpt)  # saved before the first step, never overwritten with inf
    assert all(torch.isfinite(t).all() for t in ckpt.model_state.values())
    assert ckpt.step < status["step"]
    drawing = np.zeros((280, 280, 4), np.uint8)
    drawing[40:240, 130:150] = 255
    probs = Predictor(ckpt).predict(drawing)
    assert np.isfinite(probs).all()

    at = app_test(monkeypatch, runs_dir, idx_data)
    at.query_params["run"] = run.id
    at.run()
    assert not at.exception, texts(at.exception)
    assert any("Lower the learning rate" in e for e in texts(at.error)), texts(at.error)
    assert any(run.id in m and "diverged" in m for m in texts(at.markdown))
    assert not next(b for b in at.button if b.label == "Start training").disabled
    for page in ("pages/runs.py", "pages/predict.py"):  # the other pages too
        at.switch_page(page).run()
        assert not at.exception, (page, texts(at.exception))
    assert earlier.status()["state"] == "finished"


# ------------------------------------------------------------------ disk full
@pytest.mark.parametrize("target", ["metrics.csv", "events.jsonl"])
@pytest.mark.worker
@pytest.mark.slow
def test_disk_full_fails_the_run_and_spares_the_others(tmp_path, zygote, idx_data, target):
    """An append to a file that lives on a full disk (/dev/full answers every write with ENOSPC)."""
    runs_dir = tmp_path / "runs"
    earlier = [fake_finished_run(runs_dir), fake_finished_run(runs_dir)]
    before = {r.id: tree_digest(r.path) for r in earlier}
    run = make_run(runs_dir, base=TINY, dataset="mnist", epochs=2)
    (run.path / target).unlink()
    (run.path / target).symlink_to("/dev/full")
    pid = zygote.fork(["worker", run.path, "--data-dir", idx_data], tmp_path / "worker.log")
    try:
        rc = zygote.wait(pid, timeout=300)
    finally:
        kill_pid(pid)
    assert rc == 1, (tmp_path / "worker.log").read_text()[-3000:]
    status = json.loads(run.status_path.read_text())
    assert status["state"] == "failed", status
    assert "No space left on device" in status["message"] and "free disk space" in status["message"], status
    assert "Traceback" not in (tmp_path / "worker.log").read_text()
    assert {r.id: tree_digest(r.path) for r in earlier} == before
    assert len(assert_no_half_runs(runs_dir)) == 3


def test_fileio_never_leaves_half_a_line_on_a_full_disk(tmp_path):
    from brnn_core.fileio import append_line

    path = tmp_path / "m.csv"
    path.symlink_to("/dev/full")
    with pytest.raises(OSError) as info:
        append_line(path, "1,2,3")
    assert info.value.errno == 28


# ------------------------------------------------------------------ read-only runs folder
def test_runs_folder_that_cannot_be_created(tmp_path, monkeypatch, capsys):
    """A runs path through a regular file (what a read-only mount does to mkdir, as root too)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file")
    runs_dir = blocker / "runs"
    with pytest.raises(OSError, match="Not a directory"):
        JobRegistry().start(runs_dir, tiny_config())
    rc = main(["train", "--runs-dir", str(runs_dir), "--set", "hidden_size=8", "--set", "device=cpu"])
    err = capsys.readouterr().err
    assert rc == 1 and "Not a directory" in err and "make the runs folder writable" in err, err
    assert "Traceback" not in err
    at = app_test(monkeypatch, runs_dir)
    at.run()
    assert not at.exception, texts(at.exception)
    assert any("cannot be used: Not a directory" in e for e in texts(at.error)), texts(at.error)
    assert blocker.read_text() == "a file"


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


def _unreadable_for(user: pwd.struct_passwd, folders: list[Path]) -> list[str]:
    """The folders `user` cannot list and enter (all their parents included), asked as that user:
    root's own view (os.access) ignores permissions."""
    return [str(f) for f in folders
            if subprocess.run(["test", "-r", str(f), "-a", "-x", str(f)], user=user.pw_uid, group=user.pw_gid,
                              extra_groups=[], timeout=30).returncode != 0]


@pytest.mark.skipif(os.geteuid() != 0 or _nobody() is None,
                    reason="needs root to run the worker as the unprivileged user 'nobody'")
@pytest.mark.worker
@pytest.mark.slow
def test_read_only_runs_folder_for_an_unprivileged_worker(zygote, idx_data):
    """As 'nobody' (root ignores permissions): a read-only runs folder refuses a new run with a message,
    and a run whose checkpoints folder is read-only fails with that message; other runs are untouched.

    The launcher imported brnn_core whole before forking, so where the checkout lives does not matter;
    torch imports parts of itself lazily, so nobody must be able to read the installed packages (not so
    when the venv sits under a private folder such as root's 0700 home: then the test is skipped)."""
    user = _nobody()
    base = Path(tempfile.mkdtemp(prefix="brnn-hardening-ro-"))
    try:
        os.chmod(base, 0o755)
        unreadable = _unreadable_for(user, [Path(torch.__file__).parent.parent, base])  # as imported: no resolve()
        if unreadable:
            pytest.skip(f"the user 'nobody' cannot read {' or '.join(unreadable)} (a private parent folder, such "
                        "as root's 0700 home), so a worker running as nobody could not import torch's lazily "
                        "loaded parts or reach the test's folders; put the venv and TMPDIR where others can read")
        readable_data = base / "data"
        shutil.copytree(idx_data, readable_data)
        os.chmod(readable_data, 0o755)  # pytest's tmp folders are root-only (0700)
        idx_data = readable_data
        runs_dir = base / "runs"
        earlier = [fake_finished_run(runs_dir), fake_finished_run(runs_dir)]
        before = {r.id: tree_digest(r.path) for r in earlier}
        nobody = {"uid": user.pw_uid, "gid": user.pw_gid, "env": {"HOME": str(base)}}

        # 1. a new run from the CLI: the runs folder (root's, 0755) is read-only for nobody
        log = base / "cli.log"
        pid = zygote.fork(["train", "--runs-dir", runs_dir, "--data-dir", idx_data, "--set", "dataset=mnist",
                           "--set", "hidden_size=8", "--set", "epochs=1", "--set", "device=cpu"], log, **nobody)
        try:
            rc = zygote.wait(pid, timeout=300)
        finally:
            kill_pid(pid)
        text = log.read_text()
        assert rc == 1, text
        assert "Permission denied" in text and "make the runs folder writable" in text and "Traceback" not in text

        # 2. a prepared run whose checkpoints folder is read-only for the worker
        # drawn_share 0: drawing digits imports scikit-image lazily, which in turn imports parts of the standard
        # library the launcher had not; nobody cannot read those where Python lives under root's home (pyenv).
        run = make_run(runs_dir, base=TINY, dataset="mnist", epochs=1, drawn_share=0.0)
        for path in [run.path, *run.path.iterdir()]:
            if path != run.checkpoint_dir:
                os.chown(path, user.pw_uid, user.pw_gid)
        pid = zygote.fork(["worker", run.path, "--data-dir", idx_data], base / "worker.log", **nobody)
        try:
            rc = zygote.wait(pid, timeout=300)
        finally:
            kill_pid(pid)
        assert rc == 1, (base / "worker.log").read_text()[-3000:]
        status = run.status()
        assert status["state"] == "failed", status
        assert "Permission denied" in status["message"] and "make the runs folder writable" in status["message"]
        assert str(run.checkpoint_dir) in status["message"]
        assert {r.id: tree_digest(r.path) for r in earlier} == before
        assert len(assert_no_half_runs(runs_dir)) == 3
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ two Start clicks at once
@pytest.mark.worker
@pytest.mark.slow
def test_concurrent_starts_start_exactly_one_run(tmp_path, monkeypatch, idx_data):
    runs_dir = tmp_path / "runs"
    registry = JobRegistry()
    clicks = 6
    barrier = threading.Barrier(clicks)
    results: list = []

    def click() -> None:
        barrier.wait()
        try:
            results.append(registry.start(runs_dir, tiny_config(dataset="mnist"), data_dir=idx_data))
        except RunError as exc:
            results.append(exc)

    try:
        with worker_environ(monkeypatch):
            threads = [threading.Thread(target=click) for _ in range(clicks)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        started = [r for r in results if isinstance(r, Run)]
        refused = [r for r in results if isinstance(r, RunError)]
        assert len(results) == clicks and len(started) == 1, results
        assert all("is still" in str(e) and started[0].id in str(e) for e in refused), refused
        assert [r.id for r in assert_no_half_runs(runs_dir)] == [started[0].id]
        assert registry.process(started[0].id) is not None
    finally:
        kill_workers(runs_dir)
    wait_for(lambda: registry.process(started[0].id) is None, 60, "the registry to reap the killed worker")


@pytest.mark.worker
@pytest.mark.slow
def test_two_tabs_clicking_start_start_one_run(tmp_path, monkeypatch, idx_data):
    """Two sessions that both show an enabled Start button; both click it."""
    runs_dir = tmp_path / "runs"
    tabs = [app_test(monkeypatch, runs_dir, idx_data), app_test(monkeypatch, runs_dir, idx_data)]
    try:
        with worker_environ(monkeypatch):
            for at in tabs:
                at.run()
                at.number_input(key="w_hidden_size").set_value(8)
                at.number_input(key="w_num_layers").set_value(1)
                at.run()
                assert not next(b for b in at.button if b.label == "Start training").disabled
            for at in tabs:
                next(b for b in at.button if b.label == "Start training").click().run()
                assert not at.exception, texts(at.exception)
        runs = assert_no_half_runs(runs_dir)
        assert len(runs) == 1, [r.id for r in runs]
        assert any(f"Started run {runs[0].id}" in s for s in texts(tabs[0].success)), texts(tabs[0].success)
        assert any("Not started" in e and "is still" in e for e in texts(tabs[1].error)), texts(tabs[1].error)
    finally:
        kill_workers(runs_dir)


# ------------------------------------------------------------------ a storm of commands
@pytest.mark.worker
@pytest.mark.slow
def test_storm_of_200_commands_no_deadlock_none_lost_or_reordered(tmp_path, monkeypatch, idx_data):
    runs_dir = tmp_path / "runs"
    rng = random.Random(1234)
    proc = None
    try:
        with worker_environ(monkeypatch):
            run, proc = jobs.start_worker(runs_dir, tiny_config(dataset="mnist"), data_dir=idx_data)
        wait_for(lambda: (run.raw_status().get("state") == "running" and metric_lines(run))
                   or proc.poll() is not None, 300, "the worker to train")
        assert proc.poll() is None, (run.path / "worker.log").read_text()[-3000:]
        sent, last_lr = [], None
        for _ in range(200):
            kind = rng.choice(["pause", "resume", "lr", "lr", "bad-lr", "clip"])
            if kind == "lr":
                last_lr = round(rng.uniform(1e-4, 1e-2), 6)
                sent.append(run.send_command("set", field="lr", value=last_lr))
            elif kind == "bad-lr":
                sent.append(run.send_command("set", field="lr", value=-1))  # refused, but acknowledged
            elif kind == "clip":
                sent.append(run.send_command("set", field="grad_clip", value=rng.choice([0.0, 1.0, 5.0])))
            else:
                sent.append(run.send_command(kind))
            time.sleep(rng.uniform(0, 0.02))  # 200 commands in about two seconds
        sent.append(run.send_command("resume"))

        def acked() -> list[str]:
            return [e["command"] for e in run.events() if e.get("command")]

        wait_for(lambda: len(acked()) >= len(sent) or proc.poll() is not None, 180,
                   "every command to be acknowledged (a deadlock if this never happens)")
        assert acked() == sent, "a command was lost, repeated or reordered"
        events = {e["command"]: e for e in run.events() if e.get("command")}
        assert events[sent[-1]]["kind"] == "resume"
        assert sum(1 for cid in sent if events[cid]["kind"] == "warning") >= 1  # the refused lr values
        assert run.raw_status()["live"]["lr"] == last_lr
        rows = len(metric_lines(run))
        wait_for(lambda: len(metric_lines(run)) > rows, 120, "training to go on after the storm")
        assert float(metric_lines(run)[-1].split(b",")[5]) == pytest.approx(last_lr, rel=1e-5)

        stop = run.send_command("stop")
        assert proc.wait(180) == 0
        status = run.status()
        assert status["state"] == "stopped", status
        assert acked()[-1] == stop and load_checkpoint(run.last_ckpt).step == status["step"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(30)


# ------------------------------------------------------------------ a stable page layout
@pytest.mark.parametrize("page", [None, "pages/runs.py"])
def test_a_flash_message_does_not_shift_the_page_layout(tmp_path, monkeypatch, page):
    """Found by benchmarks/soak.py: a message inserted above the columns moved every element after it, and the
    browser kept the live panel's old copy on screen (two button rows, the stale one showing 'loading')."""
    runs_dir = tmp_path / "runs"
    fake_finished_run(runs_dir)
    at = app_test(monkeypatch, runs_dir, page=page)
    at.run()

    def layout() -> list:
        return [(key, type(child).__name__) for key, child in at.main.children.items()]

    before = layout()
    at.session_state["_flash"] = [("info", "Stopping: saving a checkpoint first…")]
    at.run()
    assert not at.exception, texts(at.exception)
    assert "Stopping: saving a checkpoint first…" in texts(at.info)
    assert layout() == before
