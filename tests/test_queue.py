"""The queue's turn-taking (brnn_core.runs.job_queue) without training: device slots, first come first served,
N GPUs taking N runs, a sweep taking the whole machine, the place-in-line message, cancelling, a slot whose lock
cannot be taken, and --seeds / Seeds text that is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from helpers import TINY, make_run, wait_for

from brnn_core import cli
from brnn_core.locks import LockError
from brnn_core.runs import job_queue as queue
from brnn_core.runs import lifecycle
from brnn_core.runs.job_queue import EVERY_SLOT, Machine, QueuedJob, View, new_job, open_slots, place, slots_for
from brnn_core.runs.rundir import list_runs
from brnn_core.runs.seeds import SeedsError, parse_seeds

TWO_GPUS = Machine(gpus=2)


def test_which_slots_a_device_setting_may_take():
    assert slots_for("auto", Machine()) == ("cpu",)
    assert slots_for("auto", Machine(mps=True)) == ("mps",)
    assert slots_for("auto", TWO_GPUS) == ("cuda-0", "cuda-1")
    assert slots_for("cuda", TWO_GPUS) == ("cuda-0", "cuda-1")
    assert slots_for("cuda:1", TWO_GPUS) == ("cuda-1",)
    assert slots_for("cpu", TWO_GPUS) == ("cpu",)  # the CPU is a device of its own beside the GPUs
    assert slots_for("../../etc", Machine()) == ("etc",)  # always a plain file name under .devices/
    assert [queue.slot_device(s) for s in ("cuda-1", "cpu", "mps")] == ["cuda:1", "cpu", "mps"]


def queued(run_id: str, queued_at: float, slots: tuple[str, ...]) -> QueuedJob:
    return QueuedJob(run_id, queued_at, slots, f"run {run_id}")


def test_first_come_first_served_per_slot():
    old_cpu, old_gpu1 = queued("a", 1.0, ("cpu",)), queued("b", 2.0, ("cuda-1",))
    me_auto = queued("c", 3.0, ("cuda-0", "cuda-1"))
    view = View((old_cpu, old_gpu1, me_auto), {"cpu": "run t"})
    assert open_slots(me_auto, view) == ("cuda-0",)  # the older run waits for cuda-1; cuda-0 is nobody's turn
    assert open_slots(old_gpu1, view) == ("cuda-1",)
    me_cpu = queued("d", 4.0, ("cpu",))
    assert open_slots(me_cpu, View((*view.waiting, me_cpu), view.holders)) == ()  # behind run a
    assert place(me_cpu, View((*view.waiting, me_cpu), view.holders)) == "queued: 2nd in line, behind run a on cpu"
    assert place(old_cpu, view) == "queued: 1st in line, behind run t on cpu"
    assert place(old_cpu, view, "sweep s is running") == "queued: 1st in line, for cpu: sweep s is running"
    assert [queue.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 21, 22)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "21st", "22nd"]


def test_a_slot_is_held_by_one_holder_and_freed_when_its_process_dies(runs_dir):
    held = queue.try_take(runs_dir, "cpu")
    assert held is not None and queue.try_take(runs_dir, "cpu") is None  # this process's other takers too
    assert queue.try_take(runs_dir, "cuda-0") is not None  # another device: its own slot
    held.release()
    again = queue.try_take(runs_dir, "cpu")
    assert again is not None
    again.release()
    # another process takes it and is killed: the kernel drops the lock, the next taker gets it
    code = ("import sys, time; from brnn_core.runs import job_queue as queue; "
            "lock = queue.try_take(sys.argv[1], 'cpu'); print('held' if lock else 'busy', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(runs_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert queue.try_take(runs_dir, "cpu") is None
    finally:
        proc.kill()
        proc.wait(30)
    assert wait_for(lambda: queue.try_take(runs_dir, "cpu"), 10, "the killed holder's slot to be free")


def polls_then_cancel(n: int):
    """A `cancelled` check that lets the queue look `n` times, then cancels (as a stop sent to the run)."""
    count = {"polls": 0}

    def check() -> None:
        count["polls"] += 1
        if count["polls"] > n:
            raise queue.Cancelled("cancelled while queued")

    return check


def test_two_gpus_take_two_runs_and_the_third_waits_its_turn(runs_dir):
    """On a (pretended) two-GPU machine: two `auto` runs train at once, one per GPU, a cpu run beside them;
    a fourth `auto` run waits behind them, says so, and leaves the queue cleanly when cancelled."""
    runs = [make_run(runs_dir, base=TINY, device=device, seed=k)
            for k, device in enumerate(["auto", "auto", "cpu", "auto"])]
    with queue.wait_turn(runs[0], TWO_GPUS) as first, queue.wait_turn(runs[1], TWO_GPUS) as second, \
            queue.wait_turn(runs[2], TWO_GPUS) as third:
        assert [r.status()["slot"] for r in runs[:3]] == ["cuda-0", "cuda-1", "cpu"]
        assert (first.device, second.device, third.device) == ("cuda:0", "cuda:1", "cpu")
        said: list[str] = []
        with pytest.raises(queue.Cancelled), queue.wait_turn(runs[3], TWO_GPUS, cancelled=polls_then_cancel(3),
                                                             say=said.append, poll_s=0.01):
            pytest.fail("the fourth run got a GPU that two runs hold")
    assert said == [f"queued: 1st in line, behind run {runs[0].id} on cuda-0/cuda-1"]  # said once, not per poll
    status = runs[3].status()
    assert status["state"] == "stopped" and status["message"] == "cancelled while queued"
    assert any(e["kind"] == "stop" and "never trained" in e["message"] for e in runs[3].events())
    assert runs[3].metrics().empty
    with queue.wait_turn(runs[3], TWO_GPUS) as turn:  # the GPUs are free again
        assert turn.device == "cuda:0"


def test_the_oldest_waiting_run_goes_first(runs_dir):
    """A younger run never jumps the queue: while an older live run waits for the cpu, a newer one may not
    take it even when it is free at that moment."""
    older, younger = make_run(runs_dir, base=TINY), make_run(runs_dir, base=TINY)
    lifecycle.joined_queue(older, os.getpid())  # this (live) process is the older run's queue entry
    time.sleep(0.01)
    with pytest.raises(queue.Cancelled), queue.wait_turn(younger, Machine(), cancelled=polls_then_cancel(3),
                                                         poll_s=0.01):
        pytest.fail("the younger run jumped the queue")
    assert younger.status()["state"] == "stopped"
    view = queue.scan(runs_dir, Machine())
    assert [e.job_id for e in view.waiting] == [older.id]  # the cancelled run left the queue
    with queue.wait_turn(older, Machine()) as turn:
        assert turn.device == "cpu" and older.status()["slot"] == "cpu"
        assert queue.scan(runs_dir, Machine()).holders == {"cpu": f"run {older.id}"}
        assert queue.busy(runs_dir) == f"run {older.id} is training on cpu"
        older.write_status(state="finished")  # as its session's last write says
    assert queue.busy(runs_dir) is None


def test_a_sweep_waits_for_the_whole_machine_and_holds_it(runs_dir):
    """A sweep's job asks for every slot at once: it waits while a run holds one, and while it holds them a
    run queued behind it waits too, even on a device the sweep does not use."""
    sweep = new_job(runs_dir, "sweep", EVERY_SLOT, title="sweep s1")
    run, said = make_run(runs_dir, base=TINY, device="auto"), []
    with queue.wait_turn(run, TWO_GPUS) as turn:
        assert turn.slots == ("cuda-0",)
        with pytest.raises(queue.Cancelled), queue.wait_turn(sweep, TWO_GPUS, cancelled=polls_then_cancel(2),
                                                             say=said.append, poll_s=0.01):
            pytest.fail("a sweep started while a run held a GPU")
    assert said == [f"queued: 1st in line, behind run {run.id} on cuda-0/cuda-1/cpu"]
    assert sweep.status()["state"] == "stopped"
    later = make_run(runs_dir, base=TINY, device="auto", seed=1)
    with queue.wait_turn(sweep, TWO_GPUS, state="running") as turn:
        assert turn.slots == ("cuda-0", "cuda-1", "cpu") and sweep.status()["slot"] == "cuda-0+cuda-1+cpu"
        assert queue.busy(runs_dir) == "sweep s1 is running on cpu"  # the first slot by name
        said.clear()
        with pytest.raises(queue.Cancelled), queue.wait_turn(later, TWO_GPUS, cancelled=polls_then_cancel(2),
                                                             say=said.append, poll_s=0.01):
            pytest.fail("a run trained during a sweep")
        assert said == ["queued: 1st in line, behind sweep s1 on cuda-0/cuda-1"]


def test_a_slot_whose_lock_cannot_be_taken_is_not_free(runs_dir):
    """RUNS/.devices/cpu.lock that is a folder (or any file that cannot be opened): the run waits, and its
    status says what is wrong and how to mend it; mended, the run takes the slot."""
    (runs_dir / ".devices" / "cpu.lock").mkdir(parents=True)
    with pytest.raises(LockError, match=r"cpu.lock cannot be used as a lock \(Is a directory\): it is a folder"):
        queue.try_take(runs_dir, "cpu")
    run, said = make_run(runs_dir, base=TINY), []
    with pytest.raises(queue.Cancelled), queue.wait_turn(run, Machine(), cancelled=polls_then_cancel(2),
                                                         say=said.append, poll_s=0.01):
        pytest.fail("a run trained on a slot nobody could lock")
    assert said[0].startswith("queued: 1st in line, for cpu: ") and "rm -r" in said[0], said
    (runs_dir / ".devices" / "cpu.lock").rmdir()
    with queue.wait_turn(run, Machine()) as turn:
        assert turn.device == "cpu"


def test_a_slots_folder_that_leads_out_of_the_runs_folder_is_never_locked(runs_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (runs_dir / ".devices").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(LockError, match="leads out of"):
        queue.try_take(runs_dir, "cpu")
    assert list(elsewhere.iterdir()) == []  # nothing created there


def test_old_job_folders_are_removed_the_newest_kept(runs_dir):
    jobs = [new_job(runs_dir, "lr-find", "cpu") for _ in range(4)]
    for k, job in enumerate(jobs):
        lifecycle.job_ended(job, "finished", "done")
        os.utime(job.path, (1000 + k, 1000 + k))
    live = new_job(runs_dir, "lr-find", "cpu")  # queued, not ended: always kept
    queue.tidy_jobs(runs_dir, keep=2)
    assert sorted(p.name for p in (runs_dir / queue.JOBS_DIR).iterdir()) == sorted(
        [jobs[2].id, jobs[3].id, live.id])


@pytest.mark.parametrize(("text", "problem"), [
    ("0,0", "seed 0 is given twice"), ("0, 1, 1", "seed 1 is given twice"), ("a", "'a' is not a seed"),
    ("1.5", "'1.5' is not a seed"), ("-1", "'-1' is not a seed"), ("", "no seeds given"),
    ("0,,1", "an empty seed between commas"), ("__import__('os')", "is not a seed"),
    (str(2**31), "out of range"), (",".join(map(str, range(101))), "at most 100"),
])
def test_seeds_text_that_is_refused(text, problem):
    with pytest.raises(SeedsError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_seeds(text)


def test_seeds_in_the_order_given():
    assert parse_seeds(" 2, 0,1 ") == [2, 0, 1]
    assert parse_seeds("7") == [7]


@pytest.mark.parametrize(("extra", "problem"), [
    (["--seeds", "0,1,1"], "seed 1 is given twice"),
    (["--seeds", "x"], "'x' is not a seed: write whole numbers separated by commas, e.g. 0,1,2"),
    (["--seeds", "0,1", "--resume", "some-run"], "cannot be combined with --resume or --from"),
    (["--seeds", "0,1", "--from", "some-run"], "cannot be combined with --resume or --from"),
    (["--seeds", "0,1", "--set", "seed=3"], "drop --set seed="),
])
def test_bad_seeds_on_the_command_line_exit_2_and_create_nothing(runs_dir, capsys, extra, problem):
    rc = cli.main(["train", "--runs-dir", str(runs_dir), "--set", "device=cpu", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and problem in err and "Traceback" not in err, err
    assert list_runs(runs_dir) == []


def test_a_queued_runs_device_is_read_once_per_scan_cache(tmp_path):
    """config.json is written before a run joins the queue and not changed while it waits: a scan with a cache
    reads it once, however often the waiting workers poll."""
    from brnn_core.fileio import atomic_write_json

    run = tmp_path / "r1"
    run.mkdir()
    atomic_write_json(run / "config.json", {"train": {"device": "cuda:1"}})
    cache: dict = {}
    assert queue.queued_device(run, "run", 1.0, cache) == "cuda:1"
    (run / "config.json").unlink()
    assert queue.queued_device(run, "run", 1.0, cache) == "cuda:1"  # from the cache, not the file
    assert queue.queued_device(run, "run", 2.0, cache) is None  # it joined again: read afresh (gone: no device)
    assert queue.queued_device(run, "run", 1.0) is None  # without a cache: read each time
