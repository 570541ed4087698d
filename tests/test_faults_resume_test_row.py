"""SIGKILL while a finished run writes its test report (after its test row), then `train --resume`, twice: the
resumed worker tests again at the same step, and metrics.csv (and so `runs export`) keeps exactly one test row."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from helpers import REPO, TINY, cli_env

from brnn_core.runs.rundir import Run, list_runs
from brnn_core.training.ending import EVALUATING


def _signature(path):
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size, st.st_ino


def _test_rows(run: Run) -> int:
    return int((run.metrics()["split"] == "test").sum())


def _kill_after_its_test_row(args: list[str], runs_dir, data_dir, run: Run | None = None) -> Run:
    """`python -m brnn_core ARGS`, killed (SIGKILL, its whole process group) once it has written a test row: while it
    writes the report, before the run is finished. Returns the run.

    Between its test row and `finished` a worker spends well under a second, less than a busy machine may take to
    notice the row. So once this worker's status says it is testing, it is stopped (SIGSTOP) and let go on a few
    milliseconds at a time (SIGCONT); its files are read only while it stands still."""
    proc = subprocess.Popen([sys.executable, "-m", "brnn_core", *args], cwd=REPO, env=cli_env(runs_dir, data_dir),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        found, before = run, None
        while time.monotonic() < deadline:
            found = found or next(iter(list_runs(runs_dir)), None)
            status = found.stored_status() if found else {}
            if before is None:
                if status.get("pid") == proc.pid and status.get("message") == EVALUATING:
                    os.killpg(proc.pid, signal.SIGSTOP)
                    before = _signature(found.metrics_path)  # a resumed run's old test row is already there
                else:
                    assert proc.poll() is None, f"it ended ({proc.returncode}) before it was killed"
                    time.sleep(0.01)
                continue
            assert status["state"] != "finished", "the report was written before the kill"
            if _signature(found.metrics_path) != before and _test_rows(found):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
                return found
            os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.005)
            os.killpg(proc.pid, signal.SIGSTOP)
        raise AssertionError("no test row within 600 s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


@pytest.mark.worker
@pytest.mark.slow
def test_a_kill_while_reporting_then_resumes_leave_one_test_row(tmp_path, brnn):
    runs_dir, data_dir = tmp_path / "runs", tmp_path / "data"
    settings = [a for k in ("dataset", "device", "hidden_size", "num_layers", "batch_size")
                for a in ("--set", f"{k}={TINY[k]}")]
    run = _kill_after_its_test_row(["train", *settings, "--set", "epochs=1"], runs_dir, data_dir)
    assert run.status()["state"] == "interrupted"
    for _ in range(2):  # each kill at the same moment of a resume
        _kill_after_its_test_row(["train", "--resume", run.id], runs_dir, data_dir, run)
        assert _test_rows(run) <= 1
    # the last resume and the export need no process of their own (what is killed above does): the same commands
    # through cli.main in this process
    done = brnn(["train", "--resume", run.id], runs_dir, data_dir)
    assert done.returncode == 0, done.stderr
    assert run.status()["state"] == "finished"
    metrics = run.metrics()
    test = metrics[metrics["split"] == "test"]
    assert len(test) == 1 and test["step"].iloc[0] == metrics["step"].max()
    assert abs(test["accuracy"].iloc[0] - run.status()["test_acc"]) < 1e-6
    out = brnn(["runs", "export", "--out", tmp_path / "all.csv"], runs_dir, data_dir)
    assert out.returncode == 0, out.stderr
    exported = pd.read_csv(tmp_path / "all.csv")
    assert (exported["split"] == "test").sum() == 1
