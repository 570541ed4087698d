"""One writer per file, under a lock (brnn_core.locks, runs.status, runs.notes, runs.worker_lock): changes made at
once by several real processes are all kept, status.json has one writer, a run's worker lock is taken once from
joining the queue to the end of its training, and no lock is ever taken through a path that leads out of its
folder."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, TINY, make_run, worker_env

from brnn_core import cli
from brnn_core.locks import LockError, try_lock
from brnn_core.runs import lifecycle, worker_lock
from brnn_core.runs.notes import MAX_NOTE, NOTES_NAME, read_notes, write_notes
from brnn_core.runs.rundir import Run, RunError

EACH = 40  # changes per process


def race(code: str, *args: str, processes: int = 2) -> None:
    """Start `processes` Python processes running `code` (argv: its number, then `args`) at the same moment: each
    waits for a go file the test writes once all of them have started."""
    go = Path(args[0]).parent / "go"
    prelude = (f"import sys, time, pathlib\nwhile not pathlib.Path({str(go)!r}).exists(): time.sleep(0.005)\n")
    procs = [subprocess.Popen([sys.executable, "-c", prelude + code, str(k), *args], cwd=REPO, env=worker_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k in range(processes)]
    time.sleep(1.0)  # their imports
    go.write_text("")
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out


@pytest.mark.worker
def test_two_processes_tagging_one_run_keep_every_tag(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    race(f"from brnn_core.runs.notes import change_tags\n"
         f"for i in range({EACH}): change_tags(sys.argv[2], add=[f'p{{sys.argv[1]}}-{{i}}'])\n", str(run))
    tags = read_notes(run).tags
    assert len(tags) == 2 * EACH and set(tags) == {f"p{k}-{i}" for k in range(2) for i in range(EACH)}


@pytest.mark.worker
def test_two_processes_changing_one_status_json_keep_every_change(runs_dir):
    """Two driver-side writers (as two prunes would) each add their records to `pruned`: none is lost."""
    run = make_run(runs_dir, base=TINY)
    race(f"from brnn_core.runs.rundir import Run\nfrom brnn_core.runs import lifecycle\n"
         f"for i in range({EACH}):\n"
         f"    lifecycle.checkpoints_pruned(Run(sys.argv[2]), {{f'p{{sys.argv[1]}}-{{i}}': {{'bytes': i}}}}, 'x')\n",
         str(run.path))
    assert sorted(run.stored_status()["pruned"]) == sorted(f"p{k}-{i}" for k in range(2) for i in range(EACH))


def test_a_tag_change_checks_the_tag_only(runs_dir, capsys):
    """A notes.json whose note is far over the limit (written by hand or another tool): tagging keeps it as it is."""
    run = make_run(runs_dir, base=TINY)
    note = "n" * 5_000_000
    (run.path / NOTES_NAME).write_text(json.dumps({"tags": ["old"], "note": note}))
    assert cli.main(["runs", "tag", run.id, "--add", "x", "--runs-dir", str(runs_dir)]) == 0, capsys.readouterr()
    assert read_notes(run.path).tags == ("old", "x") and read_notes(run.path).note == note
    assert cli.main(["runs", "note", run.id, "n" * (MAX_NOTE + 1), "--runs-dir", str(runs_dir)]) == 2
    assert "keep it under" in capsys.readouterr().err  # a note change still checks the note
    assert read_notes(run.path).note == note
    write_notes(run.path, tags=["y"], note=note)  # the Runs page saves both: the note as it is stays unchecked
    assert read_notes(run.path).tags == ("y",) and read_notes(run.path).note == note


# An audit hook (sys.addaudithook, which cannot be removed: hence a process of its own) sees every file the real
# code opens or renames. A status.json writer is the innermost brnn_core function outside fileio.py on the stack
# of a rename onto status.json or an open of it for writing.
AUDIT = r"""
import json, os, sys, traceback
from pathlib import Path
writers, worker_locks = set(), []

def writer() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "brnn_core" in frame.filename and not frame.filename.endswith("fileio.py"):
            return f"{Path(frame.filename).relative_to(Path(frame.filename).parents[2]).as_posix()}:{frame.name}"
    return "?"

def hook(event, args):
    if event == "os.rename" and Path(str(args[1])).name == "status.json":
        writers.add(writer())
    elif event == "open" and isinstance(args[0], (str, Path)):
        name, mode, flags = Path(str(args[0])).name, args[1] or "", args[2] or 0
        if name == "status.json" and (any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR)):
            writers.add(writer())
        elif name == ".worker.lock":
            worker_locks.append(str(args[0]))

sys.addaudithook(hook)
from brnn_core.cli import main
runs, data = sys.argv[1], sys.argv[2]
common = ["--runs-dir", runs, "--data-dir", data]
sets = [a for s in sys.argv[3:] for a in ("--set", s)]
assert main(["train", *common, *sets]) == 0
first = len(worker_locks)
(run,) = [p.name for p in Path(runs).iterdir() if not p.name.startswith(".")]
assert main(["train", *common, "--resume", run, "--set", "epochs=2"]) == 0
print(json.dumps({"writers": sorted(writers), "worker_lock_opens": [first, len(worker_locks) - first]}))
"""


@pytest.mark.worker
def test_one_status_writer_and_one_worker_lock_from_queue_to_end(tmp_path, idx_data):
    """A new run and its resume through the CLI (each waits in the queue, then trains; the resume is put back in
    the queue by the driver side, runs.lifecycle): every status.json write in the process is runs.status's, and
    each training took the run's worker lock once, from joining the queue to its end (the resume's check asks
    once more)."""
    settings = [f"{k}={v}" for k, v in {**TINY, "dataset": "mnist", "epochs": 1}.items()]
    out = subprocess.run([sys.executable, "-c", AUDIT, str(tmp_path / "runs"), str(idx_data), *settings], cwd=REPO,
                         env=worker_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["writers"] == ["brnn_core/runs/status.py:_store"]
    assert seen["worker_lock_opens"] == [1, 2]  # the first training; the resume's check, then its training


def test_locks_never_lead_out_of_their_folder(runs_dir, tmp_path):
    """A run folder that is a link to a run elsewhere, or a lock file that is a link: nothing is locked or written
    there, and the message says what to do."""
    elsewhere = make_run(tmp_path / "elsewhere", base=TINY)
    linked = Run(runs_dir / elsewhere.id)
    linked.path.symlink_to(elsewhere.path, target_is_directory=True)
    before = sorted(p.name for p in elsewhere.path.iterdir())
    with pytest.raises(RunError, match="read-only here"):  # refused before any lock is tried
        linked.write_status(message="through the link")
    with pytest.raises(RunError, match="read-only here"), worker_lock.hold(linked.path):
        pass
    with pytest.raises(LockError, match="leads out of"):  # and the locks refuse such a path on their own
        try_lock(linked.path / ".status.lock", runs_dir)
    assert sorted(p.name for p in elsewhere.path.iterdir()) == before
    assert elsewhere.stored_status()["message"] == "queued"

    run = make_run(runs_dir, base=TINY)
    target = tmp_path / "precious"
    target.write_text("keep")
    (run.path / ".status.lock").symlink_to(target)
    with pytest.raises(LockError, match="is a symbolic link"):
        lifecycle.still_queued(run, "x")
    assert target.read_text() == "keep"


def test_a_worker_lock_that_cannot_be_opened_is_said_not_ignored(runs_dir):
    run = make_run(runs_dir, base=TINY)
    (run.path / worker_lock.LOCK_NAME).mkdir()
    with pytest.raises(LockError, match=r"\.worker\.lock cannot be used as a lock .*rm -r"), \
            worker_lock.hold(run.path):
        pass
    assert not worker_lock.held(run.path)  # asking is still an answer (the holder's attempt says why)
