"""A run folder linked into the runs folder from elsewhere (`ln -s /elsewhere/run runs/<id>`) is listed read-only:
nothing deletes, writes or locks through it (prune, delete, tags and note, status, commands, the worker lock, a
resume), a branch of it copies its checkpoint instead of hard-linking a file that lives outside, and a run whose
checkpoints/ leads out of it is never pruned through it. docs/run-directory.md, "Runs linked from elsewhere"."""

from __future__ import annotations

import json
import socket

import psutil
import pytest
from helpers import app_test, copy_run, no_exception, run_cli, texts, tree_digest

from brnn_core import cli
from brnn_core.runs import worker_lock
from brnn_core.runs.branch import PARENT_CKPT, create_branch
from brnn_core.runs.index import RunIndex
from brnn_core.runs.notes import write_notes
from brnn_core.runs.retention import PruneItem, PrunePlan, apply_prune, delete_checkpoints, plan_prune
from brnn_core.runs.rundir import Run, RunError, delete_run
from brnn_core.sweep.disk import prune_last

OWN = "20000101-000000-mnist-sample-own0"
LINK = "20991231-000000-mnist-sample-link"  # newer: on a tie in val_loss the prune would rank it second


@pytest.fixture
def linked(tmp_path, finished):
    """runs/OWN (an ordinary run) and runs/LINK, a symlink to the same run kept in elsewhere/."""
    runs_dir = tmp_path / "runs"
    own = copy_run(finished, runs_dir, OWN)
    target = copy_run(finished, tmp_path / "elsewhere", LINK)
    (runs_dir / LINK).symlink_to(target.path, target_is_directory=True)
    return runs_dir, own, target


def test_prune_from_the_cli_never_reaches_through_a_linked_run(linked, tmp_path):
    runs_dir, own, target = linked
    before = tree_digest(target.path)
    done = run_cli(["runs", "prune", "--keep-best", "1", "--per", "all"], runs_dir, tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert f"untouched: {LINK} (run {LINK} is a link to {target.path}" in done.stdout, done.stdout
    assert tree_digest(target.path) == before  # its checkpoints are all there, and no lock file was made in it
    assert own.best_ckpt.is_file()  # the only prunable run is the best of the selection: kept
    listed = run_cli(["runs", "list", "--format", "json"], runs_dir, tmp_path / "data")
    rows = {row["run_id"]: row for row in json.loads(listed.stdout)}
    assert listed.returncode == 0 and rows[LINK]["state"] == "finished"
    assert rows[LINK]["problem"].startswith(f"a link to {target.path}: read-only here"), rows[LINK]
    assert rows[OWN]["problem"] is None


def test_nothing_writes_deletes_or_locks_through_the_link(linked, capsys):
    runs_dir, _, target = linked
    before = tree_digest(target.path)
    run = Run(runs_dir / LINK)
    says = f"run {LINK} is a link to {target.path}"
    for attempt in (lambda: delete_run(runs_dir, LINK),
                    lambda: write_notes(run.path, tags=["x"]),
                    lambda: run.write_status(message="hello"),
                    lambda: run.send_command("stop"),
                    lambda: run.log_event("note", "hello"),
                    lambda: delete_checkpoints(run, ["best.pt", "last.pt"], "test", by="runs prune"),
                    lambda: prune_last(run, run.stored_status(), "not among the best"),
                    lambda: worker_lock.hold(run.path).__enter__()):
        with pytest.raises(RunError, match=says):
            attempt()
    for args in (["runs", "tag", LINK, "--add", "x"], ["runs", "note", LINK, "hello"], ["train", "--resume", LINK]):
        assert cli.main([*args, "--runs-dir", str(runs_dir)]) == 2, args
        assert says in capsys.readouterr().err, args
    # a plan made before the folder became a link (the Runs page's preview, then a confirm) deletes nothing
    plan = PrunePlan(runs_dir, 1, "val_loss", "all", [PruneItem(LINK, ("best.pt", "last.pt"), (), 0, 2.0, 2, "all")])
    assert apply_prune(plan) == []
    assert tree_digest(target.path) == before
    assert list(RunIndex(runs_dir).table()["run_id"]) == [LINK, OWN]  # still listed, whole


def test_a_branch_of_a_linked_run_copies_its_checkpoint(linked):
    runs_dir, _, target = linked
    child = create_branch(runs_dir, LINK, "last")
    copied = child.checkpoint_dir / PARENT_CKPT
    assert child.path.parent == runs_dir and copied.read_bytes() == target.last_ckpt.read_bytes()
    assert copied.stat().st_ino != target.last_ckpt.stat().st_ino and target.last_ckpt.stat().st_nlink == 1


def test_a_checkpoints_folder_that_leads_out_of_its_run_is_never_pruned_through(linked, tmp_path):
    runs_dir, own, _ = linked
    outside = tmp_path / "bigdisk"
    own.checkpoint_dir.rename(outside)
    own.checkpoint_dir.symlink_to(outside, target_is_directory=True)
    before = tree_digest(outside)
    plan = plan_prune(runs_dir, [OWN], 1, per="all")
    assert OWN in plan.untouched and "checkpoints folder is a link to" in plan.untouched[OWN], plan.untouched
    with pytest.raises(RunError, match="nothing is written or deleted through it"):
        delete_checkpoints(own, ["best.pt"], "test", by="runs prune")
    assert tree_digest(outside) == before


def test_the_train_page_says_why_a_linked_run_takes_no_command(linked, monkeypatch):
    """A run linked in while its own worker (here: this process) trains it elsewhere: Pause is offered, and a click
    says why nothing is sent instead of raising."""
    runs_dir, _, target = linked
    me = psutil.Process()
    target.write_status(state="running", pid=me.pid, pid_started=me.create_time(), host=socket.gethostname(),
                        message="epoch 1/1")
    before = tree_digest(target.path)
    at = app_test(monkeypatch, runs_dir, page="pages/train.py")
    at.query_params["run"] = LINK
    at.run()
    no_exception(at)
    pause = next(b for b in at.button if b.label == "Pause")
    assert not pause.disabled
    pause.click().run()
    no_exception(at)
    assert any(f"Not sent: run {LINK} is a link to {target.path}" in e for e in texts(at.error)), texts(at.error)
    assert tree_digest(target.path) == before
