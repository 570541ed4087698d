"""The run directory: atomic creation, readable metrics, true state of dead workers, ids, deletion."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import psutil
import pytest
from helpers import SMALL_MODEL, wait_for

from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.fileio import append_line, read_complete_lines
from brnn_core.runs.index import read_run, runs_table
from brnn_core.runs.jobs import start_worker
from brnn_core.runs.rundir import (
    METRIC_COLUMNS,
    RunError,
    create_run,
    delete_run,
    list_runs,
    resolve_run,
    validate_run_id,
)
from brnn_core.runs.status import QUEUED_GRACE_S
from brnn_core.states import ACTIVE_STATES

RUN_FILES = ("config.json", "status.json", "metrics.csv", "events.jsonl", "control.jsonl", "checkpoints")


def test_create_run_makes_a_complete_directory(runs_dir):
    run = create_run(runs_dir, {"train": {"dataset": "mnist-sample"}, "dataset": "mnist-sample"}, run_id="r1")
    assert run.path == runs_dir / "r1" and run.exists()
    assert sorted(p.name for p in run.path.iterdir()) == sorted(RUN_FILES)
    assert run.stored_status()["state"] == "queued" and run.status()["state"] == "queued"
    assert run.metrics_path.read_text() == ",".join(METRIC_COLUMNS) + "\n"
    assert [p.name for p in runs_dir.iterdir()] == ["r1"]  # no .creating-* staging folder left
    with pytest.raises(RunError, match="already exists"):
        create_run(runs_dir, {}, run_id="r1")


def test_failed_create_leaves_nothing_behind(runs_dir):
    with pytest.raises(TypeError):  # json cannot sort int and str keys: fails half-way through creation
        create_run(runs_dir, {1: "a", "b": 2}, run_id="broken")
    assert list(runs_dir.iterdir()) == []
    assert list_runs(runs_dir) == []


def test_listing_never_shows_a_partial_run(runs_dir):
    stray = runs_dir / ".creating-x-123"  # what a crash mid-create leaves: hidden from listings
    stray.mkdir()
    (stray / "config.json").write_text("{}")
    (runs_dir / "no-config").mkdir()  # not a run
    problems, done = [], threading.Event()

    def create_many():
        for i in range(40):
            create_run(runs_dir, {"dataset": "mnist-sample", "i": i}, run_id=f"run-{i:02d}")
        done.set()

    creator = threading.Thread(target=create_many)
    creator.start()
    seen = 0
    while not done.is_set() or seen == 0:
        for run in list_runs(runs_dir):
            missing = [name for name in RUN_FILES if not (run.path / name).exists()]
            if missing:
                problems.append((run.id, missing))
            seen += 1
    creator.join()
    assert problems == []
    assert [r.id for r in list_runs(runs_dir)] == [f"run-{i:02d}" for i in reversed(range(40))]  # newest first


def test_metrics_are_readable_with_pandas(finished):
    df = pd.read_csv(finished.metrics_path)
    assert list(df.columns) == METRIC_COLUMNS
    assert set(df.split) == {"train", "val", "test"}
    assert df[df.split == "val"].epoch.tolist() == list(range(1, SMALL_MODEL["epochs"] + 1))
    assert df.loss.notna().all() and pd.api.types.is_float_dtype(df.loss)
    assert (df[df.split != "train"].accuracy.between(0, 1)).all()
    assert df[df.split == "train"].accuracy.isna().all()
    pd.testing.assert_frame_equal(df, finished.metrics(), check_dtype=False)
    data = read_run(finished.path)
    assert data.status["state"] == "finished" and data.config["train"]["hidden_size"] == SMALL_MODEL["hidden_size"]
    assert {"start", "epoch", "finished"} <= set(data.events.kind)
    report = json.loads((finished.path / "report.json").read_text())
    assert sum(map(sum, report["confusion_matrix"])) == 500


def test_metrics_ignore_a_half_written_line(runs_dir):
    run = create_run(runs_dir, {}, run_id="m")
    run.log_metric(step=10, epoch=0.25, split="train", loss=1.5, lr=0.01, samples_per_s=900.0, elapsed_s=1.0)
    with open(run.metrics_path, "a") as fh:
        fh.write("20,0.5,train,1.2")  # a writer killed mid-line
    df = run.metrics()
    assert df.step.tolist() == [10] and df.loss.tolist() == [1.5]
    lines, offset = read_complete_lines(run.metrics_path)
    assert len(lines) == 2 and offset < run.metrics_path.stat().st_size


def test_append_line_writes_whole_lines(tmp_path):
    path = tmp_path / "log.jsonl"
    threads = [threading.Thread(target=lambda i=i: [append_line(path, json.dumps({"t": i, "n": n, "pad": "x" * 500}))
                                                    for n in range(50)]) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines, _ = read_complete_lines(path)
    assert len(lines) == 200 and all(json.loads(line)["pad"] == "x" * 500 for line in lines)


def _dead_pid() -> tuple[int, float]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(proc.pid).create_time()
    proc.wait()
    return proc.pid, started


@pytest.mark.parametrize("state", ["running", "paused", "loading", "stopping"])
def test_active_run_with_a_dead_worker_reads_as_interrupted(runs_dir, state):
    run = create_run(runs_dir, {}, run_id="r")
    pid, started = _dead_pid()
    run.write_status(state=state, pid=pid, pid_started=started, message="epoch 1/2")
    status = run.status()
    assert status["state"] == "interrupted" and "resume" in status["message"]
    assert run.stored_status()["state"] == state  # the file is left as the worker wrote it


def test_live_worker_keeps_its_state_and_a_reused_pid_does_not(runs_dir):
    run = create_run(runs_dir, {}, run_id="r")
    me = psutil.Process(os.getpid())
    run.write_status(state="running", pid=me.pid, pid_started=me.create_time())
    assert run.status()["state"] == "running"
    run.write_status(pid_started=me.create_time() - 3600)  # same pid, another process's start time
    assert run.status()["state"] == "interrupted"


def test_queued_run_never_picked_up_becomes_interrupted(runs_dir):
    run = create_run(runs_dir, {}, run_id="q")
    assert run.status()["state"] == "queued"
    run.write_status(created=time.time() - QUEUED_GRACE_S - 1)
    assert run.status()["state"] == "interrupted"
    finished = create_run(runs_dir, {}, run_id="f")
    finished.write_status(state="finished", created=0)
    assert finished.status()["state"] == "finished"  # only active states are checked


@pytest.mark.parametrize("content", [b"[1, 2]", b'"a string"', b"{not json", b"\xff\xfe"],
                         ids=["list", "string", "not-json", "not-utf8"])
def test_a_damaged_status_reads_as_a_damaged_run_with_a_note(runs_dir, content):
    run = create_run(runs_dir, {}, run_id="d")
    run.status_path.write_bytes(content)
    status = run.status()  # never raises: the pages and the CLI show it like any ended run
    assert status["state"] == "interrupted" and status["message"].startswith("status.json ")
    assert "resume continues from the last checkpoint" in status["message"] and run.read_status().damaged
    assert run.status()["state"] not in ACTIVE_STATES
    run.write_status(state="queued", message="resuming", created=time.time())  # a resume rewrites it whole
    assert "damaged" not in run.stored_status() and run.status()["state"] == "queued"


def test_status_rewrites_keep_unknown_keys_and_refuse_unknown_fields(runs_dir):
    run = create_run(runs_dir, {}, run_id="u")
    run.status_path.write_text(json.dumps({**run.stored_status(), "from_a_later_version": {"x": 1}}))
    run.write_status(step=5, live={"lr": 0.01})
    status = run.read_status()
    assert status["from_a_later_version"] == {"x": 1} and (status.step, status.live) == (5, {"lr": 0.01})
    with pytest.raises(TypeError, match="status.json has no field 'stpe'"):
        run.write_status(stpe=6)
    with pytest.raises(TypeError, match="status.json field 'step' takes int, not str"):
        run.write_status(step="6")
    assert run.stored_status()["step"] == 5
    old = create_run(runs_dir, {}, run_id="old")
    old.status_path.write_text(json.dumps({"state": "finished"}))  # a run from before most fields existed
    assert (old.read_status().step, old.read_status().live, old.status()["state"]) == (0, {}, "finished")


@pytest.mark.parametrize("bad", ["../x", "/abs", "a/b", "", "with space", "..", ".hidden", "a..b", "-x", "x" * 129,
                                 "tab\tname", "new\nline", None, 5])
def test_validate_run_id_rejects(bad):
    with pytest.raises(RunError, match="not a valid run id"):
        validate_run_id(bad)


def test_validate_run_id_accepts():
    for good in ("20261129-101010-mnist-ab12", "run_1.v2", "A", "x" * 128):
        assert validate_run_id(good) == good


def test_resolve_run(runs_dir):
    run = create_run(runs_dir, {}, run_id="known")
    assert resolve_run(runs_dir, "known").path == run.path
    assert resolve_run(runs_dir / "elsewhere", run.path).path == run.path  # a directory path works anywhere
    with pytest.raises(RunError, match="no run 'missing'"):
        resolve_run(runs_dir, "missing")
    with pytest.raises(RunError, match="not a valid run id"):
        resolve_run(runs_dir, "../known")


def test_delete_run(runs_dir):
    done = create_run(runs_dir, {}, run_id="done")
    done.write_status(state="finished")
    keep = create_run(runs_dir, {}, run_id="keep")
    me = psutil.Process(os.getpid())
    keep.write_status(state="running", pid=me.pid, pid_started=me.create_time())
    delete_run(runs_dir, "done")
    assert not done.path.exists() and [r.id for r in list_runs(runs_dir)] == ["keep"]
    with pytest.raises(RunError, match="still running; stop it before deleting"):
        delete_run(runs_dir, "keep")
    assert keep.exists()
    with pytest.raises(RunError):
        delete_run(runs_dir, "../keep")
    assert sorted(p.name for p in runs_dir.iterdir()) == ["keep"]  # no .deleting-* left


def test_runs_table(finished):
    table = runs_table(finished.path.parent)
    row = table.iloc[0]
    assert (row.run_id, row.state, row.dataset, row.hidden) == (finished.id, "finished", "mnist-sample",
                                                                SMALL_MODEL["hidden_size"])
    assert row.test_acc == pytest.approx(finished.status()["test_acc"], abs=1e-5)
    assert 0 < row.best_val_acc <= 1 and row.duration_s > 0


# ------------------------------------------------------------------ the control channel, with a real worker
@pytest.fixture
def worker_procs():
    """Worker subprocesses started by a test; killed (whole process group) if still alive at teardown."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # start_worker gives each worker its own session
            proc.wait(timeout=30)


@pytest.mark.worker
@pytest.mark.slow
def test_pause_set_resume_stop_a_real_worker(runs_dir, data_dir, worker_procs, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = TrainConfig(dataset="mnist-sample", device="cpu", hidden_size=16, num_layers=1, epochs=200,
                      log_interval=2, lr=0.01, lr_schedule="constant")  # a set lr is the lr of the next step
    run, proc = start_worker(runs_dir, cfg, data_dir=data_dir)
    worker_procs.append(proc)
    status = lambda: run.status()  # noqa: E731
    alive = lambda: proc.poll() is None or pytest.fail(  # noqa: E731
        f"worker exited with {proc.returncode}: {(run.path / 'worker.log').read_text()[-2000:]}")

    wait_for(lambda: alive() and status()["state"] == "running" and status().get("step", 0) >= 4, 180,
             "the worker to start training")

    run.send_command("pause")
    paused = wait_for(lambda: alive() and (s := status())["state"] == "paused" and s, 60, "state paused")
    step = paused["step"]
    metrics_rows = len(run.metrics())
    # Two heartbeats later (1 s apart while paused) the worker is alive and the step has not moved.
    beat = paused["heartbeat"]
    later = wait_for(lambda: alive() and (s := status())["heartbeat"] > beat + 1.5 and s, 30, "two heartbeats")
    assert later["state"] == "paused" and later["step"] == step
    assert len(run.metrics()) == metrics_rows

    run.send_command("set", field="lr", value=0.001)
    event = wait_for(lambda: alive() and next((e for e in run.events() if e["kind"] == "set"), None), 30,
                     "the set event")
    assert event["message"] == f"lr 0.01 -> 0.001 at step {step}"
    assert wait_for(lambda: status().get("live", {}).get("lr") == 0.001, 30, "live lr in status.json")

    run.send_command("resume")
    wait_for(lambda: alive() and status()["state"] == "running" and status()["step"] > step + 4, 60,
             "training to continue")
    m = run.metrics()
    new_rows = m[(m.split == "train") & (m.step > step)]
    assert len(new_rows) and (new_rows.lr == 0.001).all()

    run.send_command("stop")
    assert proc.wait(timeout=120) == 0
    final = run.status()
    assert final["state"] == "stopped" and final["step"] > step
    ckpt = load_checkpoint(run.last_ckpt)
    assert ckpt.step == final["step"]
    assert ckpt.train_config["live"]["lr"] == 0.001
    assert ckpt.optimizer_state["param_groups"][0]["lr"] == 0.001
    ckpt.build_model()  # loads into a fresh model
    kinds = [e["kind"] for e in run.events()]
    assert [k for k in kinds if k in ("start", "pause", "set", "resume", "stop", "stopped")] == \
        ["start", "pause", "set", "resume", "stop", "stopped"]


def test_a_worker_on_another_machine_is_judged_by_its_heartbeat():
    """A sweep trial on a cluster node writes into the shared runs folder: its pid means nothing here."""
    import socket

    from brnn_core.runs.status import REMOTE_STALE_S, worker_alive

    remote = {"pid": os.getpid(), "pid_started": 0.0, "host": "node-7.cluster.invalid"}
    assert worker_alive({**remote, "heartbeat": time.time() - 5})
    assert not worker_alive({**remote, "heartbeat": time.time() - REMOTE_STALE_S - 1})
    here = {"pid": os.getpid(), "host": socket.gethostname(), "heartbeat": 0}
    assert worker_alive(here)  # this machine: the pid decides, however old the heartbeat
