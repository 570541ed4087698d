"""One damaged entry in the runs folder is that entry's problem, never the folder's: a symlink loop, a link to
nothing, a file where a folder should be or a folder where a file should be. `runs list` exits 0 with each problem
in its row, and the Runs and Train pages render (each damaged run inspected) without a traceback.
(test_damaged_run_files.py: files whose content is damaged.)"""

from __future__ import annotations

import os
import shutil

import pytest
from helpers import copy_run, walk_runs_and_train_pages

from brnn_core import cli
from brnn_core.runs.index import RunIndex
from brnn_core.training.worker import train_run_dir

GOOD = "20000101-000000-mnist-sample-good"


def _folder_for(name: str):
    def damage(run_path):
        target = run_path / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
        target.mkdir()
    return damage


def _unreadable(name: str):
    def damage(run_path):
        """A file whose every read fails with an I/O error, for root too (reading address 0 of a process's memory):
        what a file nobody may read does for an unprivileged user."""
        (run_path / name).unlink(missing_ok=True)
        (run_path / name).symlink_to("/proc/self/mem")
    return damage


def _file_for_checkpoints(run_path):
    shutil.rmtree(run_path / "checkpoints")
    (run_path / "checkpoints").write_text("not a folder")


# case -> (how the run folder is damaged, what its problem says); None: the entry is not a run folder at all
DAMAGE = {
    "notes-a-folder": (_folder_for("notes.json"), "notes.json is not a file"),
    "status-a-folder": (_folder_for("status.json"), "status.json is not a file"),
    "config-a-folder": (_folder_for("config.json"), "config.json is not a file"),
    "metrics-a-folder": (_folder_for("metrics.csv"), "metrics.csv is not a file"),
    "events-a-folder": (_folder_for("events.jsonl"), None),
    "report-a-folder": (_folder_for("report.json"), None),
    "checkpoints-a-file": (_file_for_checkpoints, "checkpoints is not a folder"),
    "config-unreadable": (_unreadable("config.json"), "config.json cannot be read (Input/output error)"),
    "notes-unreadable": (_unreadable("notes.json"), "notes.json cannot be read (Input/output error)"),
    "status-unreadable": (_unreadable("status.json"), "status.json cannot be read"),
    "metrics-unreadable": (_unreadable("metrics.csv"), "metrics.csv cannot be read (Input/output error)"),
}


def damaged_folder(runs_dir, finished) -> dict[str, str | None]:
    """A runs folder with one good run, one run per DAMAGE case and two entries that are not run folders: a symlink
    loop and a link to nothing. Returns each entry's id -> what its problem says."""
    copy_run(finished, runs_dir, GOOD)
    said = {}
    for k, (case, (damage, problem)) in enumerate(DAMAGE.items()):
        run = copy_run(finished, runs_dir, f"200001{k + 1:02d}-000000-mnist-sample-{case}")
        damage(run.path)
        said[run.id] = problem
    os.symlink("loop-b", runs_dir / "loop-a")
    os.symlink("loop-a", runs_dir / "loop-b")
    os.symlink(runs_dir.parent / "gone", runs_dir / "20000201-000000-mnist-sample-gone")
    said.update({"loop-a": "cannot be opened: Too many levels of symbolic links",
                 "loop-b": "cannot be opened: Too many levels of symbolic links",
                 "20000201-000000-mnist-sample-gone": "which does not exist"})
    return said


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_runs_list_shows_each_damaged_entry_and_exits_0(tmp_path, finished, capsys, fmt):
    runs_dir = tmp_path / "runs"
    said = damaged_folder(runs_dir, finished)
    assert cli.main(["runs", "list", "--runs-dir", str(runs_dir), "--format", fmt]) == 0
    out = capsys.readouterr().out
    for run_id, problem in said.items():
        line = next(line for line in out.splitlines() if run_id in line) if fmt == "table" else out
        assert run_id in out and (problem is None or problem in line), (run_id, problem, line)
    table = RunIndex(runs_dir).table()
    problems = dict(zip(table["run_id"], table["problem"], strict=True))
    assert set(problems) == {GOOD, *said}
    assert not isinstance(problems[GOOD], str)  # None or NaN: the good run has no problem
    for run_id, problem in said.items():
        assert problem is None or problem in problems[run_id], (run_id, problems[run_id])


def test_the_runs_and_train_pages_render_beside_damaged_entries(dirs, finished):
    runs_dir, _ = dirs
    walk_runs_and_train_pages({GOOD, *damaged_folder(runs_dir, finished)})


def test_a_run_whose_config_cannot_be_read_is_never_trained_with_the_defaults(tmp_path, finished):
    run = copy_run(finished, tmp_path / "runs")
    _unreadable("config.json")(run.path)
    for kind in ("last", "best"):
        (run.checkpoint_dir / f"{kind}.pt").unlink()
    run.write_status(state="stopped", message="stopped at step 8, checkpoint saved")
    assert train_run_dir(run, data_dir=tmp_path / "data", resume=True) == "failed"
    message = run.status()["message"]
    assert message.startswith(f"{run.config_path} holds no training settings"), message
    assert not any(run.checkpoint_dir.iterdir())  # nothing trained
