"""The run queue with real worker processes and real (tiny) training: runs queued behind a running one train one
after another in the order started, from the job registry and from the CLI; a killed worker frees its device; a
queued run can be cancelled (a stop, or Ctrl-C in the CLI); the queue is on disk, so a new registry sees it; and
`train --seeds` trains one run per seed, one group, in turn."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from helpers import (
    kill_workers,
    run_cli,
    start_cli_training,
    stop_process,
    tail,
    tiny_config,
    wait_for,
    wait_for_state,
    worker_environ,
)

from brnn_core.runs import job_queue as queue
from brnn_core.runs.index import seed_group
from brnn_core.runs.jobs import JobRegistry
from brnn_core.runs.rundir import Run

SHORT = ("dataset=mnist", "hidden_size=8", "num_layers=1", "batch_size=512", "epochs=1", "device=cpu",
         "drawn_share=0", "lr_schedule=constant")
LONG = (*SHORT[:4], "epochs=1000", *SHORT[5:])


def message(run: Run) -> str:
    return run.status().get("message") or ""


def assert_one_after_another(runs: list[Run]) -> None:
    """Each run finished, and began training only once the one before it had ended."""
    statuses = [r.status() for r in runs]
    assert all(s["state"] == "finished" for s in statuses), [(s["state"], s.get("message")) for s in statuses]
    for before, after in zip(statuses, statuses[1:], strict=False):
        assert after["started"] >= before["ended"], (before, after)


@pytest.mark.worker
@pytest.mark.slow
def test_queued_runs_train_in_order_a_killed_worker_frees_the_device_and_a_cancel_leaves(tmp_path, monkeypatch,
                                                                                        idx_data):
    runs_dir = tmp_path / "runs"
    registry = JobRegistry()
    try:
        with worker_environ(monkeypatch):
            first = registry.start(runs_dir, tiny_config(dataset="mnist"), data_dir=idx_data)  # never ends alone
            wait_for_state(first, "running", 180)
            # paused, it holds the device as a training run does, without spending the CPU the others start with
            first.send_command("pause")
            wait_for_state(first, "paused", 180)
            later = [registry.start(runs_dir, tiny_config(dataset="mnist", epochs=1, seed=seed), data_dir=idx_data)
                     for seed in (1, 2, 3)]
            wanted = [f"queued: 1st in line, behind run {first.id} on cpu",
                      f"queued: 2nd in line, behind run {later[0].id} on cpu",
                      f"queued: 3rd in line, behind run {later[1].id} on cpu"]
            wait_for(lambda: [message(r) for r in later] == wanted, 180,
                     f"the three runs to wait in line (they say {[message(r) for r in later]})")
            assert first.status()["state"] == "paused" and first.status()["slot"] == "cpu"

            # a new registry (a restarted dashboard) finds the same queue on disk, in the same order
            JobRegistry()
            assert [e.job_id for e in queue.scan(runs_dir, queue.Machine()).waiting] == [r.id for r in later]

            # the middle one is cancelled: it ends stopped without training, and the last moves up
            cancelled = later.pop(1)
            cancelled.send_command("stop")
            status = wait_for_state(cancelled, "stopped", 60)
            assert status["message"] == "cancelled while queued"
            wait_for(lambda: registry.process(cancelled.id) is None, 60, "the cancelled run's worker to exit")
            wait_for(lambda: message(later[1]) == f"queued: 2nd in line, behind run {later[0].id} on cpu", 60,
                     "the last run to move up")

            # the training worker is killed: the kernel frees its device and the next run in line trains
            killed_at = time.time()
            os.kill(first.status()["pid"], signal.SIGKILL)
            wait_for_state(later[1], "finished", 300)
        assert first.status()["state"] == "interrupted"
        assert_one_after_another(later)
        assert later[0].status()["started"] >= killed_at  # it only began once the first run's worker was gone
        assert cancelled.metrics().empty
        assert not any(cancelled.checkpoint_dir.glob("*.pt"))
    finally:
        kill_workers(runs_dir)


def run_id_in(log: Path) -> str:
    found = re.search(r"run directory: \S+/(\S+)", tail(log, 100_000))
    return found.group(1) if found else ""


@pytest.mark.worker
@pytest.mark.slow
def test_cli_train_waits_its_turn_saying_so_and_ctrl_c_cancels_it(tmp_path, idx_data):
    runs_dir, procs = tmp_path / "runs", []
    logs = [tmp_path / f"{name}.log" for name in ("first", "b", "c", "d")]
    try:
        procs.append(start_cli_training(runs_dir, idx_data, *LONG, log=logs[0]))
        first = Run(runs_dir / wait_for(lambda: run_id_in(logs[0]), 120, "the first run's directory"))
        wait_for_state(first, "running", 180)
        # paused, it holds the device as a training run does, without spending the CPU the others start with
        first.send_command("pause")
        wait_for_state(first, "paused", 180)
        ids = [first.id]
        for k, log in enumerate(logs[1:], start=1):  # each started once the one before it is in line
            procs.append(start_cli_training(runs_dir, idx_data, *SHORT, f"seed={k}", log=log))
            ids.append(wait_for(lambda log=log: run_id_in(log), 120, f"run {k}'s directory"))
            said = f"queued: {queue.ordinal(k)} in line, behind run {ids[k - 1]} on cpu; waiting (Ctrl-C cancels)"
            wait_for(lambda log=log, said=said: said in tail(log), 120, f"run {k} to say {said!r}: {tail(log)}")

        procs[3].send_signal(signal.SIGINT)  # Ctrl-C while it waits
        assert procs[3].wait(60) == 1, tail(logs[3])
        assert f"cancelled while queued (Ctrl-C): run {ids[3]} never trained" in tail(logs[3])
        assert Run(runs_dir / ids[3]).status()["message"] == "cancelled while queued (Ctrl-C)"
        assert Run(runs_dir / ids[3]).status()["state"] == "stopped"

        first.send_command("stop")
        for proc, log in zip(procs[:3], logs[:3], strict=True):
            assert proc.wait(300) == 0, tail(log)
        assert first.status()["state"] == "stopped"
        assert_one_after_another([Run(runs_dir / i) for i in ids[1:3]])
    finally:
        for proc in procs:
            stop_process(proc)


@pytest.mark.worker
def test_seeds_train_one_run_per_seed_as_one_group_in_turn(tmp_path, idx_data):
    runs_dir = tmp_path / "runs"
    done = run_cli(["train", "--seeds", "2,0,1", *[a for s in SHORT for a in ("--set", s)]], runs_dir, idx_data)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    dirs = re.findall(r"run directory: (\S+)", done.stdout)
    assert len(dirs) == 3, done.stdout
    runs = [Run(Path(d)) for d in dirs]
    assert [r.config()["train"]["seed"] for r in runs] == [2, 0, 1]  # in the order given
    groups = {seed_group(r.config()["train"]) for r in runs}
    assert len(groups) == 1 and f"seed group {groups.pop()}: 3 runs" in done.stdout
    queued = [r.status()["queued_at"] for r in runs]
    assert queued == sorted(queued)  # in line at once, in that order
    assert_one_after_another(runs)
    assert len({r.status()["test_acc"] for r in runs}) == 3  # three seeds, three different models


@pytest.mark.worker
@pytest.mark.slow
def test_a_device_slot_nobody_can_lock_keeps_every_run_waiting_until_mended(tmp_path, idx_data):
    """RUNS/.devices/cpu.lock is a folder: the slot cannot be locked, so it is nobody's. Two real `train`
    processes both wait (neither trains, both say why and the fix); once it is removed they train one after
    another."""
    runs_dir = tmp_path / "runs"
    lock = runs_dir / ".devices" / "cpu.lock"
    lock.mkdir(parents=True)
    logs = [tmp_path / f"{k}.log" for k in range(2)]
    procs = [start_cli_training(runs_dir, idx_data, *SHORT, f"seed={k}", log=log) for k, log in enumerate(logs)]
    try:
        runs = wait_for(lambda: len(rs := [Run(p) for p in runs_dir.iterdir() if not p.name.startswith(".")]) == 2
                        and rs, 120, "both runs' directories")
        said = f"for cpu: {lock} cannot be used as a lock (Is a directory): it is a folder: remove it (rm -r {lock})"
        wait_for(lambda: all(r.status().get("queued_at") for r in runs), 120, "both runs in the queue")
        first, second = sorted(runs, key=lambda r: r.status()["queued_at"])
        wait_for(lambda: message(first) == f"queued: 1st in line, {said}" and
                 message(second) == f"queued: 2nd in line, behind run {first.id} on cpu", 120,
                 f"the runs to say why they wait ({message(first)!r}, {message(second)!r})")
        time.sleep(2.0)
        assert all(r.status()["state"] == "queued" and r.metrics().empty for r in runs)  # neither trained
        lock.rmdir()
        for proc, log in zip(procs, logs, strict=True):
            assert proc.wait(300) == 0, tail(log)
        assert_one_after_another([first, second])
    finally:
        for proc in procs:
            stop_process(proc)
