"""A full disk: the run writing to it fails with a message that says what to do, other runs are untouched,
and no file is left with half a line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TINY, assert_no_half_runs, fake_finished_run, kill_pid, make_run, tree_digest


@pytest.mark.parametrize("target", ["metrics.csv", "events.jsonl"])
@pytest.mark.worker
@pytest.mark.slow
def test_disk_full_fails_the_run_and_spares_the_others(tmp_path, zygote, idx_data, target):
    """An append to a file that lives on a full disk (/dev/full answers every write with ENOSPC)."""
    runs_dir = tmp_path / "runs"
    earlier = [fake_finished_run(runs_dir), fake_finished_run(runs_dir)]
    before = {r.id: tree_digest(r.path) for r in earlier}
    run = make_run(runs_dir, base=TINY, dataset="mnist", epochs=2)
    (run.path / target).unlink()
    (run.path / target).symlink_to("/dev/full")
    pid = zygote.fork(["worker", run.path, "--data-dir", idx_data], tmp_path / "worker.log")
    try:
        rc = zygote.wait(pid, timeout=300)
    finally:
        kill_pid(pid)
    assert rc == 1, (tmp_path / "worker.log").read_text()[-3000:]
    status = json.loads(run.status_path.read_text())
    assert status["state"] == "failed", status
    assert "No space left on device" in status["message"] and "free disk space" in status["message"], status
    assert "Traceback" not in (tmp_path / "worker.log").read_text()
    assert {r.id: tree_digest(r.path) for r in earlier} == before
    assert len(assert_no_half_runs(runs_dir)) == 3


def test_fileio_never_leaves_half_a_line_on_a_full_disk(tmp_path):
    from brnn_core.fileio import append_line

    path = tmp_path / "m.csv"
    path.symlink_to("/dev/full")
    with pytest.raises(OSError) as info:
        append_line(path, "1,2,3")
    assert info.value.errno == 28


def test_a_log_linked_to_a_device_reads_as_empty(tmp_path):
    """A run file linked to /dev/full or /dev/zero (reads that never end): the readers that follow a growing
    file (the TensorBoard mirror, the control channel) read what its size says, nothing, instead of filling the
    memory until the machine kills a process."""
    from brnn_core.fileio import read_complete_lines

    for device in ("/dev/full", "/dev/zero"):
        link = tmp_path / f"metrics-{Path(device).name}.csv"
        link.symlink_to(device)
        assert read_complete_lines(link) == ([], 0)
