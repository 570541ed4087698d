"""Checkpoint retention (`runs prune`), run sizes on the Runs page, and what a pruned run can still do.

Four real 1-epoch runs are trained once for the module (two seed groups: three seeds at lr 0.01, one at
0.003); each test prunes its own copies of them.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from helpers import TINY, copy_run, no_exception, open_page, train_run, tree_digest

from brnn_core import cli
from brnn_core.runs import worker_lock
from brnn_core.runs.branch import PARENT_CKPT, BranchError, create_branch
from brnn_core.runs.index import RunIndex, seed_group
from brnn_core.runs.jobs import JobRegistry
from brnn_core.runs.notes import read_notes, write_notes
from brnn_core.runs.retention import RunSizes, checkpoint_files, plan_prune
from brnn_core.runs.rundir import Run, RunError, list_runs
from brnn_core.sweep.disk import prune_last

ONE_EPOCH = {**TINY, "epochs": 1, "log_interval": 4}
RECORDS = ("config.json", "metrics.csv", "events.jsonl", "report.json", "notes.json")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> list[Run]:
    root = tmp_path_factory.mktemp("retention")
    runs = []
    for seed, lr in ((0, 0.01), (1, 0.01), (2, 0.01), (0, 0.003)):
        run, state = train_run(root / "runs", root / "data", **ONE_EPOCH, seed=seed, lr=lr)
        assert state == "finished", run.status()
        runs.append(run)
    return runs


@pytest.fixture
def copies(trained, runs_dir) -> list[Run]:
    """The trained runs copied into this test's runs folder, each tagged, with an Inside-page states file."""
    out = []
    for run in trained:
        copy = copy_run(run, runs_dir)
        write_notes(copy.path, tags=["kept-record"], note="a note that must survive")
        (copy.checkpoint_dir / "best.pt.states.npz").write_bytes(b"x" * 1000)
        out.append(copy)
    return out


def prune(runs_dir, *args: str) -> int:
    return cli.main(["runs", "prune", "--runs-dir", str(runs_dir), *args])


def best_loss(run: Run) -> float:
    m = run.metrics()
    return float(m[m.split == "val"].loss.min())


def records(run: Run) -> dict[str, bytes]:
    return {name: (run.path / name).read_bytes() for name in RECORDS if (run.path / name).is_file()}


def test_dry_run_deletes_nothing_and_prints_what_the_prune_frees(copies, runs_dir, capsys):
    for run in copies[:2]:  # a run no worker ever locked (an imported one): a dry run creates no lock file either
        (run.path / worker_lock.LOCK_NAME).unlink()
    before = tree_digest(runs_dir)
    assert prune(runs_dir, "--keep-best", "1", "--dry-run") == 0
    dry = capsys.readouterr().out.splitlines()
    assert dry[0] == "dry run: nothing is deleted"
    assert tree_digest(runs_dir) == before
    group_a = sorted(copies[:3], key=best_loss)
    losers = {r.id for r in group_a[1:]}
    listed = [line.split()[0] for line in dry[1:-1]]
    assert set(listed) == losers
    # each line's size is what that run's checkpoints/ holds (model files and the states file beside best.pt)
    for line in dry[1:-1]:
        run = Run(runs_dir / line.split()[0])
        size = sum(p.stat().st_size for p in run.checkpoint_dir.iterdir())
        assert f"{size / 1e3:.1f} kB" in line or f"{size / 1e6:.1f} MB" in line, (line, size)

    assert prune(runs_dir, "--keep-best", "1") == 0
    real = capsys.readouterr().out.splitlines()
    assert real[:-2] == dry[1:-1]  # the same runs with the same sizes
    assert dry[-1].startswith("frees ") and real[-2].startswith("freed " + dry[-1].split()[1])


def test_prune_keeps_the_best_k_per_group_and_every_record(copies, runs_dir, capsys):
    group_a = sorted(copies[:3], key=best_loss)
    alone = copies[3]
    kept_records = {r.id: records(r) for r in copies}
    assert prune(runs_dir, "--keep-best", "1") == 0
    for run in [group_a[0], alone]:  # the best of its group, and a group of one
        assert run.best_ckpt.is_file() and run.last_ckpt.is_file(), run.id
        assert "pruned" not in run.stored_status()
    for run in group_a[1:]:
        assert not list(run.checkpoint_dir.iterdir()), list(run.checkpoint_dir.iterdir())  # states file gone too
        status = run.stored_status()
        assert status["state"] == "finished"
        pruned = status["pruned"]
        assert set(pruned) == {"best.pt", "last.pt"}
        assert pruned["best.pt"]["by"] == "runs prune" and "best.pt.states.npz" in pruned["best.pt"]["files"]
        assert pruned["best.pt"]["bytes"] > 1000 and f"seed group {seed_group(run.config()['train'])}" in \
            pruned["last.pt"]["why"]
        assert "removed to save disk" in status["message"]
        assert any(e["kind"] == "pruned" for e in run.events())
    for run in copies:
        now = records(run)
        assert now.keys() == kept_records[run.id].keys()
        assert {k: v for k, v in now.items() if k != "events.jsonl"} == \
            {k: v for k, v in kept_records[run.id].items() if k != "events.jsonl"}
        assert read_notes(run.path).note == "a note that must survive"
    capsys.readouterr()
    assert prune(runs_dir, "--keep-best", "1") == 0  # again: nothing is left to free
    assert capsys.readouterr().out.splitlines()[-2].startswith("freed 0 B from 0 run(s)")
    assert plan_prune(runs_dir, [r.id for r in copies], 1).items == []


def test_accuracy_ranks_highest_first_and_per_all_ranks_the_selection(copies, runs_dir):
    def acc(run):
        m = run.metrics()
        return float(m[m.split == "val"].accuracy.max())

    ids = [r.id for r in copies]
    plan = plan_prune(runs_dir, ids, 2, "val_accuracy", "all")
    best_two = sorted(copies, key=lambda r: (-acc(r), r.id))[:2]
    assert set(plan.kept) == {r.id for r in best_two}
    assert {i.run_id for i in plan.items} == set(ids) - set(plan.kept)
    # --filter narrows the selection: only group B, where its one run is the best
    assert prune(runs_dir, "--keep-best", "1", "--per", "all", "--filter", "lr < 0.005") == 0
    assert all(r.best_ckpt.is_file() for r in copies)


def test_active_queued_and_locked_runs_are_never_touched(copies, runs_dir, capsys):
    group_a = sorted(copies[:3], key=best_loss)
    running, queued = group_a[1], group_a[2]
    running.write_status(state="running", pid=os.getpid(), pid_started=None, heartbeat=time.time())
    queued.write_status(state="queued", pid=None, created=time.time())
    alone = copies[3]
    locked_digest = tree_digest(alone.path)
    before = {r.id: tree_digest(r.path / "checkpoints") for r in (running, queued)}
    with worker_lock.hold(alone.path):  # a live worker of a finished-looking run (its status was lost)
        assert prune(runs_dir, "--keep-best", "1", "--per", "all", "--by", "val_accuracy") == 0
    out = capsys.readouterr().out
    for run in (running, queued):
        assert tree_digest(run.path / "checkpoints") == before[run.id]
        assert f"untouched: {run.id}" in out
    assert tree_digest(alone.path) == locked_digest and "worker lock" in out


def test_a_lock_taken_after_the_preview_wins(copies, runs_dir):
    group_a = sorted(copies[:3], key=best_loss)
    plan = plan_prune(runs_dir, [r.id for r in group_a], 1)
    from brnn_core.runs.retention import apply_prune

    with worker_lock.hold(group_a[1].path):  # resumed between the preview and the confirmation
        done = dict(apply_prune(plan))
    assert group_a[1].id not in done and group_a[1].best_ckpt.is_file()
    assert group_a[2].id in done and not group_a[2].best_ckpt.is_file()


def test_branch_and_resume_of_a_pruned_run_are_refused_with_the_reason(copies, runs_dir, capsys):
    loser = sorted(copies[:3], key=best_loss)[-1]
    assert prune(runs_dir, "--keep-best", "1") == 0
    capsys.readouterr()
    n_runs = len(list_runs(runs_dir))
    data = str(runs_dir.parent / "data")
    for kind in ("last", "best"):
        code = cli.main(["train", "--from", f"{loser.id}:{kind}", "--runs-dir", str(runs_dir), "--data-dir", data])
        err = capsys.readouterr().err
        assert code == 2 and f"{kind}.pt was pruned by `runs prune`" in err and "nothing to branch from" in err, err
    code = cli.main(["train", "--resume", loser.id, "--set", "epochs=3", "--runs-dir", str(runs_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "last.pt was pruned" in err and "cannot be resumed" in err, err
    with pytest.raises(BranchError, match="pruned by `runs prune`"):
        JobRegistry().branch(runs_dir, loser.id, "best")
    loser.write_status(state="stopped")  # a resumable state: only the prune stands in the way
    with pytest.raises(RunError, match="last.pt was pruned"):
        JobRegistry().resume(loser)
    assert len(list_runs(runs_dir)) == n_runs  # nothing was created
    assert loser.stored_status()["state"] == "stopped"  # and nothing queued


def test_sweep_pruning_is_the_same_deletion(copies):
    run = copies[0]
    (run.checkpoint_dir / "last.pt.states-l0-forward-h.npy").write_bytes(b"y" * 500)
    size = run.last_ckpt.stat().st_size + 500
    assert prune_last(run, run.stored_status(), "not among the best 1 trials by val_loss") == size
    record = run.stored_status()["pruned"]["last.pt"]
    assert record["bytes"] == size and record["by"] == "sweep"
    assert set(checkpoint_files(run)) == {"best.pt"}  # best.pt and its states file stay


def test_hard_links_are_counted_once(copies, runs_dir):
    parent = copies[3]
    child = create_branch(runs_dir, parent.id, "last")
    assert (child.checkpoint_dir / PARENT_CKPT).stat().st_nlink == 2
    child.write_status(state="failed", message="failed before its first epoch")  # ended, never validated
    plan = plan_prune(runs_dir, [parent.id, child.id], 1, per="all")
    (item,) = plan.items
    assert item.run_id == child.id and item.frees == 0  # the parent keeps the same file: nothing is freed
    sizes = RunSizes()
    both = sizes.sizes(runs_dir, [parent.id, child.id])
    assert sizes.total(runs_dir, [parent.id, child.id]) == both[parent.id] + both[child.id] - parent.last_ckpt.stat(
    ).st_size


def test_sizes_are_read_again_only_when_a_run_changes(copies, runs_dir):
    sizes = RunSizes()
    run = copies[0]
    first = sizes.sizes(runs_dir, [run.id])[run.id]
    assert first == sum(p.stat().st_size for p in run.path.rglob("*") if p.is_file())
    assert prune(runs_dir, "--keep-best", "1", "--per", "all", "--filter", f"id == {copies[1].id} or "
                 f"id == {run.id}") == 0
    after = sizes.sizes(runs_dir, [run.id])[run.id]
    assert after == sum(p.stat().st_size for p in run.path.rglob("*") if p.is_file())
    assert (after < first) == (not run.best_ckpt.is_file())


@pytest.mark.parametrize(("args", "says"), [
    (["--keep-best", "0"], "a prune that would leave nothing"),
    (["--keep-best", "1", "--filter", "lr >"], "the filter does not parse"),
    (["--keep-best", "1", "--filter", "__import__('os').system('true')"], "the filter does not parse"),
    (["--keep-best", "1", "--filter", "lr > 5"], "no run selected"),
    (["--keep-best", "1", "--by", "speed"], "use one of val_loss, val_accuracy, last_val_loss, last_val_accuracy"),
    (["--keep-best", "1", "--by", "test_accuracy"], "test set"),
])
def test_bad_input_exits_2_naming_the_fix(copies, runs_dir, capsys, args, says):
    before = tree_digest(runs_dir)
    assert prune(runs_dir, *args) == 2
    assert says in capsys.readouterr().err
    assert tree_digest(runs_dir) == before


def test_branches_keep_the_parents_tags_only_when_asked(copies, runs_dir, capsys):
    parent = copies[3]
    write_notes(parent.path, tags=["baseline", "lr-low"])
    data = str(runs_dir.parent / "data")
    base = ["train", "--from", parent.id, "--runs-dir", str(runs_dir), "--data-dir", data]
    known = {r.id for r in list_runs(runs_dir)}
    branch_plain = create_branch(runs_dir, parent.id, "last")
    branch_kept = create_branch(runs_dir, parent.id, "last", keep_tags=True)
    assert read_notes(branch_plain.path).tags == ()
    assert read_notes(branch_kept.path).tags == ("baseline", "lr-low")
    assert cli.main(["train", "--keep-tags", "--runs-dir", str(runs_dir), "--data-dir", data]) == 2
    assert "--keep-tags" in capsys.readouterr().err and {r.id for r in list_runs(runs_dir)} == known | {
        branch_plain.id, branch_kept.id}
    assert cli.main([*base, "--keep-tags", "--set", "epochs=2"]) == 0  # creates the branch and trains it
    (new,) = [r for r in list_runs(runs_dir) if r.id not in known | {branch_plain.id, branch_kept.id}]
    assert read_notes(new.path).tags == ("baseline", "lr-low")
    assert json.loads(new.config_path.read_text())["parent"]["run_id"] == parent.id


def test_runs_page_shows_sizes_and_prunes_after_a_preview(copies, dirs):
    runs_dir, _ = dirs
    group_a = sorted(copies[:3], key=best_loss)
    at = open_page("pages/runs.py", "Runs")
    at.toggle(key="runs_group_seeds").set_value(False).run()
    table = at.dataframe(key="runs_table").value
    sizes = dict(zip(table["run_id"], table["size_mb"], strict=True))
    for run in copies:
        on_disk = sum(p.stat().st_size for p in run.path.rglob("*") if p.is_file()) / 1e6
        assert sizes[run.id] == pytest.approx(on_disk, rel=0.05), run.id
    before = tree_digest(runs_dir)
    at.button(key="prune_preview").click().run()
    no_exception(at)
    assert tree_digest(runs_dir) == before  # a preview deletes nothing
    (free,) = [e for e in at.expander if "the runs folder holds" in e.label]
    preview = free.dataframe[0].value
    assert set(preview["run_id"]) == {r.id for r in group_a[1:]}
    assert at.button(key="prune_go").disabled  # not without the confirmation
    at.checkbox(key="prune_sure").check().run()
    at.button(key="prune_go").click().run()
    no_exception(at)
    assert any("Freed" in s.value for s in at.success)
    assert group_a[0].best_ckpt.is_file() and not any(r.best_ckpt.is_file() for r in group_a[1:])
    # the page still loads with pruned runs; inspecting one says why it cannot be branched from
    at.selectbox(key="inspect").set_value(group_a[2].id).run()
    no_exception(at)
    why = "last.pt and best.pt were pruned by `runs prune`"
    assert any(why in c.value and "nothing is left to branch from" in c.value for c in at.caption)
    table = at.dataframe(key="runs_table").value
    assert table.set_index("run_id").loc[group_a[2].id, "size_mb"] < sizes[group_a[2].id]


def test_branch_form_offers_the_parents_tags_unticked(copies, dirs):
    parent = copies[3]
    write_notes(parent.path, tags=["baseline"])
    at = open_page("pages/runs.py", "Runs")
    at.selectbox(key="inspect").set_value(parent.id).run()
    box = at.checkbox(key=f"runs_branch_{parent.id}_keep_tags")
    assert box.label == "Keep the parent's tags (baseline)" and box.value is False and not box.disabled
    no_exception(at)
    assert RunIndex(dirs[0]).table().shape[0] == len(copies)
