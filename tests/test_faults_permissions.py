"""A runs folder that cannot be written: a new run is refused with a message (CLI, job registry and page),
and a worker that cannot write its checkpoints fails with that message; other runs are untouched."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import (
    TINY,
    app_test,
    assert_no_half_runs,
    fake_finished_run,
    kill_pid,
    make_run,
    texts,
    tiny_config,
    tree_digest,
)

from brnn_core.cli import main
from brnn_core.runs.jobs import JobRegistry


def test_runs_folder_that_cannot_be_created(tmp_path, monkeypatch, capsys):
    """A runs path through a regular file (what a read-only mount does to mkdir, as root too)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file")
    runs_dir = blocker / "runs"
    with pytest.raises(OSError, match="Not a directory"):
        JobRegistry().start(runs_dir, tiny_config())
    rc = main(["train", "--runs-dir", str(runs_dir), "--set", "hidden_size=8", "--set", "device=cpu"])
    err = capsys.readouterr().err
    assert rc == 1 and "Not a directory" in err and "make the runs folder writable" in err, err
    assert "Traceback" not in err
    at = app_test(monkeypatch, runs_dir)
    at.run()
    assert not at.exception, texts(at.exception)
    assert any("cannot be used: Not a directory" in e for e in texts(at.error)), texts(at.error)
    assert blocker.read_text() == "a file"


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


def _unreadable_for(user: pwd.struct_passwd, folders: list[Path]) -> list[str]:
    """The folders `user` cannot list and enter (all their parents included), asked as that user:
    root's own view (os.access) ignores permissions."""
    return [str(f) for f in folders
            if subprocess.run(["test", "-r", str(f), "-a", "-x", str(f)], user=user.pw_uid, group=user.pw_gid,
                              extra_groups=[], timeout=30).returncode != 0]


@pytest.mark.skipif(os.geteuid() != 0 or _nobody() is None,
                    reason="needs root to run the worker as the unprivileged user 'nobody'")
@pytest.mark.worker
@pytest.mark.slow
def test_read_only_runs_folder_for_an_unprivileged_worker(zygote, idx_data):
    """As 'nobody' (root ignores permissions): a read-only runs folder refuses a new run with a message,
    and a run whose checkpoints folder is read-only fails with that message; other runs are untouched.

    The launcher imported brnn_core whole before forking, so where the checkout lives does not matter;
    torch imports parts of itself lazily, so nobody must be able to read the installed packages (not so
    when the venv sits under a private folder such as root's 0700 home: then the test is skipped)."""
    user = _nobody()
    base = Path(tempfile.mkdtemp(prefix="brnn-hardening-ro-"))
    try:
        os.chmod(base, 0o755)
        unreadable = _unreadable_for(user, [Path(torch.__file__).parent.parent, base])  # as imported: no resolve()
        if unreadable:
            pytest.skip(f"the user 'nobody' cannot read {' or '.join(unreadable)} (a private parent folder, such "
                        "as root's 0700 home), so a worker running as nobody could not import torch's lazily "
                        "loaded parts or reach the test's folders; put the venv and TMPDIR where others can read")
        readable_data = base / "data"
        shutil.copytree(idx_data, readable_data)
        os.chmod(readable_data, 0o755)  # pytest's tmp folders are root-only (0700)
        idx_data = readable_data
        runs_dir = base / "runs"
        earlier = [fake_finished_run(runs_dir), fake_finished_run(runs_dir)]
        before = {r.id: tree_digest(r.path) for r in earlier}
        nobody = {"uid": user.pw_uid, "gid": user.pw_gid, "env": {"HOME": str(base)}}

        # 1. a new run from the CLI: the runs folder (root's, 0755) is read-only for nobody
        log = base / "cli.log"
        pid = zygote.fork(["train", "--runs-dir", runs_dir, "--data-dir", idx_data, "--set", "dataset=mnist",
                           "--set", "hidden_size=8", "--set", "epochs=1", "--set", "device=cpu"], log, **nobody)
        try:
            rc = zygote.wait(pid, timeout=300)
        finally:
            kill_pid(pid)
        text = log.read_text()
        assert rc == 1, text
        assert "Permission denied" in text and "make the runs folder writable" in text and "Traceback" not in text

        # 2. a prepared run whose checkpoints folder is read-only for the worker
        # drawn_share 0: drawing digits imports scikit-image lazily, which in turn imports parts of the standard
        # library the launcher had not; nobody cannot read those where Python lives under root's home (pyenv).
        run = make_run(runs_dir, base=TINY, dataset="mnist", epochs=1, drawn_share=0.0)
        for path in [run.path, *run.path.iterdir()]:
            if path != run.checkpoint_dir:
                os.chown(path, user.pw_uid, user.pw_gid)
        (runs_dir / ".devices").mkdir()  # its device slots are usable (a slot nobody can lock is never free)
        os.chown(runs_dir / ".devices", user.pw_uid, user.pw_gid)
        pid = zygote.fork(["worker", run.path, "--data-dir", idx_data], base / "worker.log", **nobody)
        try:
            rc = zygote.wait(pid, timeout=300)
        finally:
            kill_pid(pid)
        assert rc == 1, (base / "worker.log").read_text()[-3000:]
        status = run.status()
        assert status["state"] == "failed", status
        assert "Permission denied" in status["message"] and "make the runs folder writable" in status["message"]
        assert str(run.checkpoint_dir) in status["message"]
        assert {r.id: tree_digest(r.path) for r in earlier} == before
        assert len(assert_no_half_runs(runs_dir)) == 3
    finally:
        shutil.rmtree(base, ignore_errors=True)
