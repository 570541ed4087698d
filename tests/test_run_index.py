"""RunIndex: every run read once, and again only when its files change; the same answers as reading afresh."""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest
from helpers import copy_run, fake_finished_run

from brnn_core.fileio import read_complete_lines
from brnn_core.runs import index as run_index
from brnn_core.runs.index import RunIndex, summary_row, val_summary
from brnn_core.runs.rundir import METRIC_COLUMNS, Run, delete_run, list_runs


def summary(run: Run) -> dict:
    """One row of the runs table, read afresh: the reference the index must agree with."""
    return summary_row(run.id, run.config(), run.status(), val_summary(read_complete_lines(run.metrics_path)[0]))


def three_runs(runs_dir) -> list[Run]:
    base = fake_finished_run(runs_dir)
    return [copy_run(base, runs_dir, f"2026010{i}-000000-mnist-sample-000{i}") for i in (1, 2)] + [base]


@pytest.fixture
def later(monkeypatch):
    """The index looks at the folder a minute after every write (a history written a while ago): a run written
    within the last second is read again on every call, since file times move in clock ticks."""
    monkeypatch.setattr(run_index, "_now_ns", lambda: time.time_ns() + 60 * 10**9)


def test_table_matches_reading_every_run_afresh(runs_dir):
    runs = three_runs(runs_dir)
    table = RunIndex(runs_dir).table()
    assert list(table["run_id"]) == sorted((r.id for r in runs), reverse=True)  # newest first
    for run in runs:
        row = table.set_index("run_id").loc[run.id].to_dict()
        fresh = summary(run)
        assert {k: v for k, v in row.items() if k != "duration_s"} == \
            {k: v for k, v in fresh.items() if k not in ("duration_s", "run_id")}
        assert row["best_val_acc"] == pytest.approx(0.3) and row["state"] == "finished"


def test_runs_are_read_again_only_when_their_files_change(runs_dir, later):
    runs = three_runs(runs_dir)
    index = RunIndex(runs_dir)
    index.table()
    assert index.reads == 3
    for _ in range(3):
        index.table()
        index.checkpoint_choices()
        index.statuses()
    assert index.reads == 3  # nothing changed: nothing read

    runs[0].write_status(state="stopped", message="stopped at step 8")  # e.g. another tool rewrote it
    assert index.statuses()[runs[0].id]["state"] == "stopped" and index.reads == 4
    assert index.table().set_index("run_id").loc[runs[0].id, "state"] == "stopped"
    assert index.reads == 4

    new = copy_run(runs[1], runs_dir, "20270101-000000-mnist-sample-ffff")
    assert index.table()["run_id"].iloc[0] == new.id and index.reads == 5
    delete_run(runs_dir, runs[2].id)
    assert runs[2].id not in set(index.table()["run_id"]) and index.reads == 5


def test_the_default_checkpoint_is_the_best_runs_own_choice_and_each_last_pt_follows_its_run(runs_dir):
    """The picker's first choice is a best.pt (calibrated when its run finished), even where a last.pt scored a
    higher validation accuracy: a run chooses by validation loss unless told otherwise, and last.pt is never
    calibrated."""
    base = fake_finished_run(runs_dir)  # best.pt at val loss 2.1, accuracy 0.3
    worse_loss, better = (copy_run(base, runs_dir, f"2026010{i}-000000-mnist-sample-000{i}") for i in (1, 2))
    for run, loss, acc in ((worse_loss, 2.2, 0.5), (better, 2.0, 0.4)):  # a second epoch, and its last.pt
        run.log_metric(step=16, epoch=2, split="val", loss=loss, accuracy=acc, lr=0.01, elapsed_s=2.4)
        os.link(run.best_ckpt, run.last_ckpt)
    choices = RunIndex(runs_dir).checkpoint_choices()
    order = [(c.run_id, c.kind) for c in choices]
    assert order[:2] == [(better.id, "best"), (better.id, "last")], order  # 0.4 at its lowest loss beats 0.3
    assert order.index((worse_loss.id, "last")) == order.index((worse_loss.id, "best")) + 1, order
    accuracy = {(c.run_id, c.kind): c.val_acc for c in choices}  # each file keeps its own accuracy for its label
    assert accuracy[(worse_loss.id, "last")] == pytest.approx(0.5)
    assert accuracy[(worse_loss.id, "best")] == pytest.approx(0.3)
    assert accuracy[(better.id, "best")] == pytest.approx(0.4)
    assert len(order) == 5 and (base.id, "best") in order


def test_checkpoints_written_or_pruned_show_without_reading_the_run_again(runs_dir, later):
    runs = three_runs(runs_dir)
    index = RunIndex(runs_dir)
    before = index.checkpoint_choices()
    assert {(c.run_id, c.kind) for c in before} == {(r.id, "best") for r in runs}
    assert before == RunIndex(runs_dir).checkpoint_choices()  # a fresh index agrees
    os.link(runs[0].best_ckpt, runs[0].last_ckpt)  # a last.pt appears
    runs[1].best_ckpt.unlink()  # a sweep prunes a trial's checkpoint
    after = {(c.run_id, c.kind) for c in index.checkpoint_choices()}
    assert after == {(runs[0].id, "best"), (runs[0].id, "last"), (runs[2].id, "best")}
    assert index.reads == 3  # only the checkpoints/ folders changed: the runs' files were not read again


def test_a_live_run_is_followed_and_a_dead_worker_is_noticed_every_time(runs_dir, later):
    run = fake_finished_run(runs_dir)
    me = psutil.Process(os.getpid())
    run.write_status(state="running", pid=me.pid, pid_started=me.create_time(), ended=None)
    index = RunIndex(runs_dir)
    assert index.statuses()[run.id]["state"] == "running"
    run.log_metric(step=16, epoch=2, split="val", loss=1.5, accuracy=0.6)  # an append: the worker is training
    assert index.table().set_index("run_id").loc[run.id, "best_val_acc"] == pytest.approx(0.6)
    reads = index.reads
    run.write_status(pid=2**22 + 12345, pid_started=1.0)  # its worker is gone (no such process)
    assert index.statuses()[run.id]["state"] == "interrupted"
    assert index.table().set_index("run_id").loc[run.id, "state"] == "interrupted"
    assert index.reads == reads + 1


def test_a_run_written_within_the_last_second_is_read_on_every_call(runs_dir):
    """Two rewrites a few ms apart can leave status.json with the same time, size and (reused) inode."""
    three_runs(runs_dir)
    index = RunIndex(runs_dir)
    index.table()
    index.table()
    assert index.reads == 3 * 2  # just written, all of them: not trusted yet


def test_val_summary_reads_what_the_old_pandas_code_read():
    header = ",".join(METRIC_COLUMNS)
    lines = [header, "10,0.5,train,2.1,,0.01,900,1.0", "20,1,val,0.9,0.71,0.01,,2.0", "bad line",
             "40,2,val,0.7,0.69,0.01,,4.0", "45,2.5,val,nan,,0.01,,4.5", "60,3,val,0.8,0.74,0.01,,6.0",
             "60,3,test,0.75,0.72,,,7.0"]
    s = val_summary(lines)
    assert s.best_val_acc == 0.74 and s.acc_at_best_loss == 0.69 and s.test_acc == 0.72 and s.last_val_acc == 0.74
    empty = val_summary([header])
    assert empty.best_val_acc is None and empty.test_acc is None and empty.acc_at_best_loss is None
    assert val_summary([header, "1,1,val,,,,,"]).last_val_acc is None  # no accuracy logged: none shown


def test_shared_between_threads(runs_dir):
    """Sessions share one index (st.cache_resource): reads from many threads while a run changes."""
    runs = three_runs(runs_dir)
    index = RunIndex(runs_dir)
    errors: list[BaseException] = []
    stop = time.monotonic() + 2.0

    def reader() -> None:
        try:
            while time.monotonic() < stop:
                assert len(index.table()) == 3 and len(index.checkpoint_choices()) == 3
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    step = 8
    while time.monotonic() < stop:
        step += 1
        runs[0].write_status(step=step)
    for t in threads:
        t.join()
    assert not errors, errors
    assert index.table().set_index("run_id").loc[runs[0].id, "step"] == step


def test_a_new_server_starts_from_the_store_and_reads_only_what_changed(runs_dir, later):
    """The dashboard's index keeps ended runs on disk (.index.json): a new process reads none of them again,
    answers the same, and still sees a run that changed, appeared or was deleted while it was away."""
    from brnn_core.runs.index_store import STORE_NAME

    runs = three_runs(runs_dir)
    store = runs_dir / STORE_NAME
    first = RunIndex(runs_dir, store=store)
    table = first.table()
    assert first.reads == 3 and store.is_file()
    assert [r.id for r in list_runs(runs_dir)] == sorted((r.id for r in runs), reverse=True)  # not a run

    second = RunIndex(runs_dir, store=store)
    assert second.table().equals(table) and second.reads == 0
    assert second.checkpoint_choices() == first.checkpoint_choices()

    runs[0].write_status(state="stopped", message="stopped by another tool")
    delete_run(runs_dir, runs[1].id)
    extra = copy_run(runs[2], runs_dir, "20260109-000000-mnist-sample-0009")
    third = RunIndex(runs_dir, store=store)
    statuses = third.statuses()
    assert third.reads == 2  # the changed run and the new one
    assert statuses[runs[0].id]["state"] == "stopped" and runs[1].id not in statuses and extra.id in statuses


def test_an_unusable_store_is_ignored(runs_dir, later):
    from brnn_core.runs.index_store import STORE_NAME, STORE_VERSION

    three_runs(runs_dir)
    store = runs_dir / STORE_NAME
    for text in ("{not json", '{"version": 99, "entries": {}}', "[]"):
        store.write_text(text)
        index = RunIndex(runs_dir, store=store)
        assert len(index.table()) == 3 and index.reads == 3
    import json

    saved = json.loads(store.read_text())  # the last index wrote a good one again
    assert saved["version"] == STORE_VERSION and len(saved["entries"]) == 3
    saved["runs_dir"] = str(runs_dir / "elsewhere")  # a store of another folder is not used
    store.write_text(json.dumps(saved))
    other = RunIndex(runs_dir, store=store)
    other.table()
    assert other.reads == 3


def test_the_cli_and_sweeps_keep_the_store_current_for_the_next_server(runs_dir, later):
    """`train` and `sweep` call update_store when they end: a server started afterwards reads no run again."""
    from brnn_core.runs.index import update_store
    from brnn_core.runs.index_store import STORE_NAME

    three_runs(runs_dir)
    update_store(runs_dir)
    index = RunIndex(runs_dir, store=runs_dir / STORE_NAME)
    assert len(index.table()) == 3 and index.reads == 0
    update_store(runs_dir / "missing")  # no runs folder: nothing to do, nothing created
    assert not (runs_dir / "missing").exists()
