"""One worker per run (brnn_core.runs.worker_lock): a lost status.json does not let a second worker into a live
run, and the live worker's next write says again who trains it."""

from __future__ import annotations

import fcntl
import os
import socket
import threading

import pytest
from helpers import TINY, make_run, run_cli, start_cli_training, stop_process, wait_for

from brnn_core.runs import worker_lock
from brnn_core.runs.jobs import JobRegistry
from brnn_core.runs.rundir import Run, RunError, list_runs
from brnn_core.training.worker import train_run_dir

TRAIN = ("dataset=mnist", "hidden_size=8", "num_layers=1", "cpu_threads=1", "epochs=200", "lr_schedule=constant")


@pytest.mark.worker
def test_a_lost_status_json_does_not_let_a_second_worker_in(tmp_path, idx_data):
    runs_dir = tmp_path / "runs"
    first = start_cli_training(runs_dir, idx_data, *TRAIN, log=tmp_path / "first.log")
    try:
        run = wait_for(lambda: (rs := list_runs(runs_dir)) and (rs[0].status().get("step") or 0) >= 5 and rs[0],
                       180, "the first worker at step 5", 0.1, proc=first, log=tmp_path / "first.log")
        run.status_path.unlink()
        assert worker_lock.held(run.path)
        second = run_cli(["train", "--resume", run.id], runs_dir, idx_data)
        assert second.returncode == 2, second.stdout + second.stderr
        # refused by the lock, or (once the worker's next heartbeat rewrote status.json) by the state it wrote
        assert "stop it before resuming" in second.stderr and "Traceback" not in second.stderr, second.stderr
        run.status_path.unlink()
        with pytest.raises(RunError, match="another live process"):  # the dashboard's Resume: the lock refuses
            JobRegistry().resume(run, data_dir=idx_data)
        # the live worker's next heartbeat writes its identity and state again
        status = wait_for(lambda: (s := Run(run.path).status()).get("pid") and s, 30, "status.json written again")
        assert status["pid"] == first.pid and status["host"] == socket.gethostname()
        assert status["state"] == "running" and status.get("started")
        steps = [int(line.split(b",")[0]) for line in run.metrics_path.read_bytes().splitlines()[1:]
                 if line.split(b",")[2] == b"train"]
        assert len(steps) == len(set(steps)), "two workers wrote metrics"
    finally:
        stop_process(first)
    assert not worker_lock.held(run.path)  # the kernel dropped it with its holder


def test_the_lock_is_free_without_a_holder_and_taken_with_one(tmp_path):
    assert not worker_lock.held(tmp_path)
    assert os.listdir(tmp_path) == []  # asking wrote nothing (a dry-run prune asks of every run)
    with open(tmp_path / worker_lock.LOCK_NAME, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert worker_lock.held(tmp_path)
        with pytest.raises(worker_lock.RunBusy, match=tmp_path.name), worker_lock.hold(tmp_path):
            pass
    assert not worker_lock.held(tmp_path)
    assert os.listdir(tmp_path) == [worker_lock.LOCK_NAME]


def test_a_holder_that_lets_go_within_the_wait_lets_the_waiter_in(tmp_path):
    with open(tmp_path / worker_lock.LOCK_NAME, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        with pytest.raises(worker_lock.RunBusy, match=tmp_path.name), worker_lock.hold(tmp_path, wait_s=0.3):
            pass  # still held when the wait ends: busy, as without one
        threading.Timer(0.5, fh.close).start()
        with worker_lock.hold(tmp_path, wait_s=60):
            assert fh.closed and worker_lock.held(tmp_path)  # held now by this wait's lock
    assert not worker_lock.held(tmp_path)


def test_a_sweep_trial_started_again_waits_for_its_parked_thread(tmp_path):
    """Tune may start a paused trial again on another actor while the one it parked in (inside tune.report, see
    sweep/trial.py) still holds the run's lock. The new worker waits: the parked thread's last status write
    ('queued') comes first, then the new worker's, and the run trains to its end."""
    runs_dir = tmp_path / "runs"
    run = make_run(runs_dir, base={**TINY, "epochs": 1})
    parked = open(run.path / worker_lock.LOCK_NAME, "a")  # noqa: SIM115 - closed by the timer, as the thread ends
    fcntl.flock(parked, fcntl.LOCK_EX)
    with pytest.raises(worker_lock.RunBusy):
        train_run_dir(run, data_dir=runs_dir)  # no wait: refused, nothing written
    assert run.stored_status()["state"] == "queued" and not run.events()

    def thread_ends() -> None:
        run.write_status(state="queued", pid=None, message="waiting for the sweep's scheduler to continue it")
        parked.close()

    threading.Timer(1.0, thread_ends).start()
    assert train_run_dir(run, data_dir=runs_dir, lock_wait_s=60) == "finished"
    status = run.stored_status()
    assert status["state"] == "finished" and status["pid"] == os.getpid()
    assert [e["kind"] for e in run.events()][0] == "start"
