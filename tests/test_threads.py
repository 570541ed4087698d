"""The CPU thread policy (training.threads): threads per process, OpenMP's wait settings, claims between runs."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest
import torch
from helpers import stop_process, torch_threads

from brnn_core.runs.jobs import job_environ
from brnn_core.training import threads
from brnn_core.training.threads import Claim, CpuClaims, ThreadKeeper, plan_threads

AUTO, FIXED = True, False


@pytest.mark.parametrize(("requested", "cores", "others", "env", "expected"), [
    (0, 2, [], {}, (2, AUTO)),  # idle 2-core machine: both cores, as the blog's loop uses
    (0, 16, [], {}, (16, AUTO)),  # more cores: never fewer than torch's own default
    (0, 1, [], {}, (1, AUTO)),
    (0, 2, [Claim(2, AUTO)], {}, (1, AUTO)),  # a second run: an even share, the first one shrinks to its share too
    (0, 16, [Claim(16, AUTO)], {}, (8, AUTO)),
    (0, 16, [Claim(8, AUTO), Claim(8, AUTO), Claim(8, AUTO)], {}, (4, AUTO)),
    (0, 16, [Claim(4, FIXED), Claim(8, AUTO)], {}, (6, AUTO)),  # sweep trials with fixed CPUs are left their cores
    (0, 2, [Claim(2, FIXED), Claim(1, AUTO)], {}, (1, AUTO)),  # never below one thread
    (3, 2, [Claim(2, AUTO)], {}, (3, FIXED)),  # cpu_threads wins over everything
    (0, 8, [Claim(8, AUTO)], {"OMP_NUM_THREADS": "2"}, (None, FIXED)),  # the user's OMP_NUM_THREADS is kept
    (0, 8, [], {"OMP_NUM_THREADS": ""}, (8, AUTO)),  # an empty variable is no setting
])
def test_plan_threads(requested, cores, others, env, expected):
    plan = plan_threads(requested, cores=cores, others=others, env=env)
    assert (plan.threads, plan.auto) == expected
    assert plan.why  # shown in the run's config.json and events


@pytest.mark.parametrize(("cores", "others", "busy", "expected"), [
    (2, [], 0.3, 2),  # the dashboard and a browser streaming a run (about 0.3 cores): every core still
    (2, [], 0.7, 1),  # someone else's test or training holds a core: a 2-thread team would wait on it
    (2, [], 3.5, 1),  # a machine far busier than its cores: one thread, never none
    (16, [], 4.2, 12),
    (2, [Claim(2, AUTO)], 1.8, 1),  # what the other training run uses is its claim, not a foreign program
    (16, [Claim(4, FIXED)], 6.0, 10),  # 4 claimed by a sweep trial, 2 by other programs
])
def test_plan_threads_leaves_cores_busy_with_other_programs(cores, others, busy, expected):
    plan = plan_threads(0, cores=cores, others=others, env={}, busy=busy)
    assert (plan.threads, plan.auto) == (expected, AUTO)
    foreign = busy - sum(c.threads for c in others) >= threads.FOREIGN_CORE
    assert ("busy with other programs" in plan.why) == foreign


def test_cpu_load_sees_another_busy_process():
    load = threads.CpuLoad()
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        load.others_cores()  # from here on
        seen = load.others_cores(at_least_s=1.0)
    finally:
        stop_process(proc)
    assert 0.5 < seen <= (psutil.cpu_count() or 1) + 0.1  # at least most of the core it burnt (more if the
    # machine is busy with other work too), never more than the machine has


def test_worker_environment_keeps_the_users_openmp_settings(tmp_path):
    """libgomp's default wait policy measured fastest (threads.py): the worker adds none, and keeps the user's."""
    env = job_environ({"PATH": "/bin", "OMP_WAIT_POLICY": "PASSIVE"}, tmp_path)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["BRNN_DATA_DIR"] == str(tmp_path)
    assert "GOMP_SPINCOUNT" not in env


@pytest.fixture
def other_process():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    stop_process(proc)


def write_claim(folder, pid: int, threads_: int, auto: bool, started: float) -> None:
    folder.mkdir(exist_ok=True)
    (folder / str(pid)).write_text(json.dumps({"threads": threads_, "auto": auto, "started": started}))


def test_claims_of_other_live_processes_are_shared_and_stale_ones_dropped(tmp_path, other_process):
    folder = tmp_path / "claims"
    started = psutil.Process(other_process.pid).create_time()
    write_claim(folder, other_process.pid, 4, True, started)
    write_claim(folder, 999_999_999, 4, True, started)  # no such process
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_claim(folder, int(dead.stdout), 4, True, started)  # exited (or its pid reused by another program)
    claims = CpuClaims(0, folder=folder, env={}, cores=4, busy=lambda wait: 4.0)  # the other claim's 4 cores
    assert claims.others() == [Claim(4, True)]
    assert sorted(p.name for p in folder.iterdir()) == [str(other_process.pid)]  # stale claims removed
    plan = claims.replan(force=True)
    assert (plan.threads, plan.auto) == (2, True)
    mine = json.loads(claims.path.read_text())  # what the other process will see of this one
    assert mine["threads"] == 2 and mine["auto"] is True
    threads.release_claim(folder)
    assert not claims.path.exists()


def test_thread_keeper_follows_the_plan_between_steps(tmp_path, other_process):
    folder = tmp_path / "claims"
    busy = {"cores": 0.0}  # what the rest of the machine uses: set by the test, not measured
    claims = CpuClaims(0, folder=folder, env={}, cores=4, busy=lambda wait: busy["cores"])
    changes = []
    with torch_threads(1):
        keeper = ThreadKeeper(0, claims, on_change=lambda step, plan: changes.append((step, plan.threads)))
        assert torch.get_num_threads() == 4 and not changes  # alone: every core, set before training starts
        write_claim(folder, other_process.pid, 4, True, psutil.Process(other_process.pid).create_time())
        hook = keeper.wrap(lambda step: step < 10)
        assert hook(3) is True and torch.get_num_threads() == 4  # re-planned at most every REPLAN_EVERY_S
        claims.planned_at -= threads.REPLAN_EVERY_S
        assert hook(12) is False  # the wrapped hook's answer comes through
        assert torch.get_num_threads() == 2 and changes == [(12, 2)]  # another run came: half the cores each
        (folder / str(other_process.pid)).unlink()
        claims.planned_at -= threads.REPLAN_EVERY_S
        hook(20)
        assert torch.get_num_threads() == 4 and changes == [(12, 2), (20, 4)]  # it left: all of them again
        busy["cores"] = 1.0  # another program takes a core
        claims.planned_at -= threads.REPLAN_EVERY_S
        hook(30)
        assert torch.get_num_threads() == 3 and changes[-1] == (30, 3)
    threads.release_claim(folder)
