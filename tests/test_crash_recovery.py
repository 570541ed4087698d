"""the worker SIGKILLed at random moments, and the dashboard server restarted mid-run.

These are the slowest hardening tests (tens of seconds); they run in `make test` like the rest.
Set BRNN_KILL_SEED to replay one sequence of kill times (the seed is printed on failure).
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import (
    REPO,
    TINY,
    app_test,
    free_port,
    kill_pid,
    make_run,
    metric_lines,
    no_exception,
    pid_alive,
    stop_process,
    texts,
    tiny_config,
    wait_for,
    worker_env,
    worker_environ,
)

from benchmarks.browser import loopback_opener
from brnn_core.checkpoint import load_checkpoint
from brnn_core.runs import jobs
from brnn_core.runs.index import read_run, runs_table
from brnn_core.runs.rundir import METRIC_COLUMNS, Run, list_runs

pytestmark = [pytest.mark.slow, pytest.mark.worker]

KILLS = 20


def rows_added(before: list, after: list) -> list:
    """Rows the resumed worker wrote: after the prefix both share (a resume first drops the rows a killed
    worker logged past its last.pt, so counting rows would point at the wrong place)."""
    n = 0
    while n < min(len(before), len(after)) and before[n] == after[n]:
        n += 1
    return after[n:]


def assert_reads_cleanly(run: Run) -> int | None:
    """Everything a reader touches parses after a kill; returns last.pt's step (None if not saved yet)."""
    data = read_run(run.path)
    assert data.status["state"] == "interrupted", data.status
    json.loads(run.status_path.read_text())  # never half a file
    json.loads(run.config_path.read_text())
    raw = run.metrics_path.read_bytes()
    assert raw.endswith(b"\n"), f"partial metrics line: {raw[-80:]!r}"
    df = pd.read_csv(io.BytesIO(raw))
    assert list(df.columns) == METRIC_COLUMNS
    assert len(df) == len(data.metrics) and df[["step", "epoch", "split", "loss"]].notna().all().all()
    assert set(df["split"]) <= {"train", "val", "test"}
    events = run.events_path.read_bytes()
    assert events == b"" or events.endswith(b"\n")
    for line in events.splitlines():
        json.loads(line)
    assert [r.id for r in list_runs(run.path.parent)] == [run.id]
    assert not [p for p in run.path.parent.iterdir() if p.name.startswith(".creating-")]
    if run.best_ckpt.exists():
        load_checkpoint(run.best_ckpt)
    if not run.last_ckpt.exists():
        assert not len(df), "training rows without any last.pt to resume from"
        return None
    return load_checkpoint(run.last_ckpt).step


def start_worker(cycle: int, run: Run, idx_data: Path, zygote, resume_argv: list, log: Path):
    """(process or None, pid): cycles 1 and 20 spawn the worker as the dashboard does, the others fork it."""
    if cycle in (0, KILLS - 1):
        proc = jobs.spawn_worker(run, data_dir=idx_data, resume=cycle > 0)
        return proc, proc.pid
    return None, zygote.fork(resume_argv, log)


def kill_at_a_random_moment(run: Run, proc, pid: int, zygote, rng: random.Random, before: list, what: str,
                            log: Path) -> tuple[bool, float]:
    """SIGKILL the worker while it trains (or, now and then, while it is still starting); once it is gone,
    (killed early, delay after training showed) for the history."""
    rc = None
    try:
        # now and then kill while it is still starting or loading (not the real-process cycles, which must
        # show that a spawned worker resumes)
        early = proc is None and rng.random() < 0.2
        if not early:
            wait_for(lambda: (rows_added(before, metric_lines(run)) and run.stored_status().get("pid") == pid)
                     or not pid_alive(pid), 300, f"{what}: the worker to train")
            assert pid_alive(pid), f"{what}: the worker exited: {log.read_text()[-2000:]}"
        delay = rng.uniform(0.05, 1.0) if early else rng.uniform(0.0, 1.2)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    finally:
        if proc is not None:
            proc.kill()
            rc = proc.wait(60)
        else:
            kill_pid(pid)
            rc = zygote.wait(pid, timeout=60)
    assert rc == -signal.SIGKILL, f"{what}: the worker ended by itself (rc {rc}) before the kill"
    wait_for(lambda: not pid_alive(pid), 60, "the killed worker to vanish")
    return early, delay


def assert_final_resume_stops_cleanly(run: Run, zygote, resume_argv: list, log: Path, ckpt_step: int) -> None:
    """One last resume, stopped on request: it picks up from last.pt and ends cleanly."""
    before = metric_lines(run)
    pid = zygote.fork(resume_argv, log)
    try:
        wait_for(lambda: rows_added(before, metric_lines(run)) or not pid_alive(pid), 300, "the final resume")
        run.send_command("stop")
        assert zygote.wait(pid, timeout=300) == 0, log.read_text()[-2000:]
    finally:
        kill_pid(pid)
    status = run.status()
    assert status["state"] == "stopped", status
    assert int(rows_added(before, metric_lines(run))[0].split(b",")[0]) == ckpt_step + 1
    train_steps = list(run.metrics().query("split == 'train'")["step"])
    assert train_steps == sorted(set(train_steps)), "a step was logged twice across the kills and resumes"
    assert load_checkpoint(run.last_ckpt).step == status["step"]
    assert not list(run.checkpoint_dir.glob(".*.tmp")), "temp files of killed saves were not cleaned up"
    resumes = [e for e in run.events() if e["kind"] == "resume"]
    assert len(resumes) >= KILLS // 2


def test_sigkill_at_random_moments_then_resume_20_times(tmp_path, zygote, idx_data, monkeypatch):
    """kill -> check -> resume -> kill ... on one run, killing during steps, checkpoint writes and appends.

    Cycles 1 and 20 start the worker exactly as the dashboard does (jobs.spawn_worker: a fresh
    `python -m brnn_core.training.worker` process); the others are forked from a launcher that already
    imported torch (the same `worker.main` code, without seconds of imports per cycle).
    """
    seed = int(os.environ.get("BRNN_KILL_SEED") or time.time_ns() % 2**32)
    rng = random.Random(seed)
    run = make_run(tmp_path / "runs", base=TINY, dataset="mnist")
    log = run.path / "worker.log"
    resume_argv = ["worker", run.path, "--resume", "--data-dir", idx_data]
    ckpt_step: int | None = None
    rows_checked = 0
    history = []
    with worker_environ(monkeypatch):
        for cycle in range(KILLS):
            before = metric_lines(run)
            proc, pid = start_worker(cycle, run, idx_data, zygote, resume_argv, log)
            early, delay = kill_at_a_random_moment(run, proc, pid, zygote, rng, before,
                                                   f"cycle {cycle} (seed {seed})", log)
            new_step = assert_reads_cleanly(run)
            new_rows = rows_added(before, metric_lines(run))
            if new_rows:
                first = int(new_rows[0].split(b",")[0])
                # The resumed run continues right after the step its last.pt recorded.
                expected = 1 if ckpt_step is None else ckpt_step + 1
                assert first == expected, (f"cycle {cycle} (seed {seed}): first new step {first}, "
                                           f"last.pt had step {ckpt_step}")
                rows_checked += 1
            torn = sorted(p.name.split(".")[1] for p in run.checkpoint_dir.glob(".*.tmp"))  # killed mid-save
            history.append((cycle, "early" if early else "training", round(delay, 2), len(new_rows), new_step, torn))
            ckpt_step = new_step if new_step is not None else ckpt_step
    print(f"seed {seed}: (cycle, phase, delay, new rows, last.pt step, torn saves)", *history, sep="\n  ")
    assert rows_checked >= KILLS // 2, f"too few cycles reached training (seed {seed}): {history}"
    assert ckpt_step is not None and ckpt_step > 0, history
    assert_final_resume_stops_cleanly(run, zygote, resume_argv, log, ckpt_step)


# ------------------------------------------------------------------ server restart
def start_server(port: int, runs_dir: Path, idx_data: Path, log: Path) -> subprocess.Popen:
    env = worker_env(BRNN_RUNS_DIR=str(runs_dir), BRNN_DATA_DIR=str(idx_data))
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.headless",
                                 "true", "--server.port", str(port), "--server.address", "127.0.0.1"],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def http_get(url: str) -> tuple[int, str]:
    opener = loopback_opener()
    try:
        with opener.open(url, timeout=5) as response:
            return response.status, response.read().decode(errors="replace")
    except OSError:
        return 0, ""


def wait_healthy(port: int, server: subprocess.Popen, log: Path) -> None:
    wait_for(lambda: http_get(f"http://127.0.0.1:{port}/_stcore/health") == (200, "ok") or server.poll() is not None,
               240, f"the dashboard on port {port} to answer /_stcore/health", interval=0.25)
    assert server.poll() is None, log.read_text()[-3000:]


def test_dashboard_restart_shows_the_true_state_of_a_live_run(tmp_path, idx_data, monkeypatch):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    log = tmp_path / "server.log"
    server = server2 = proc = None
    try:
        with worker_environ(monkeypatch):
            port = free_port()
            server = start_server(port, runs_dir, idx_data, log)
            run, proc = jobs.start_worker(runs_dir, tiny_config(dataset="mnist"), data_dir=idx_data)
            wait_healthy(port, server, log)
            assert http_get(f"http://127.0.0.1:{port}/")[0] == 200
            wait_for(lambda: run.stored_status().get("state") == "running" and metric_lines(run), 300,
                       "the worker to train")

            server.send_signal(signal.SIGKILL)  # the server dies without any clean-up
            server.wait(60)
            assert proc.poll() is None, "the worker died with the dashboard server"
            assert os.getpgid(proc.pid) != os.getpgid(0), "the worker shares a process group with its starter"

            port2 = free_port()
            server2 = start_server(port2, runs_dir, idx_data, log)
            wait_healthy(port2, server2, log)
            rows = len(metric_lines(run))
            wait_for(lambda: len(metric_lines(run)) > rows, 120, "the worker to keep training")
            assert run.status()["state"] == "running"
            assert runs_table(runs_dir).set_index("run_id").loc[run.id, "state"] == "running"

            at = app_test(monkeypatch, runs_dir, idx_data)
            at.run()
            no_exception(at)
            assert any(run.id in m and "running" in m for m in texts(at.markdown)), texts(at.markdown)
            buttons = {b.label: b.disabled for b in at.button}
            assert buttons["Start training"] is False and buttons["Stop"] is False and buttons["Pause"] is False

            proc.kill()
            proc.wait(60)
            assert run.status()["state"] == "interrupted"
            at = app_test(monkeypatch, runs_dir, idx_data)
            at.run()
            no_exception(at)
            assert any(run.id in m and "interrupted" in m for m in texts(at.markdown)), texts(at.markdown)
            assert any("the worker stopped without saying why" in w for w in texts(at.warning)), texts(at.warning)
            buttons = {b.label: b.disabled for b in at.button}
            assert buttons["Start training"] is False and buttons["Resume"] is False and buttons["Stop"] is True
            assert http_get(f"http://127.0.0.1:{port2}/_stcore/health") == (200, "ok")
    finally:
        stop_process(server)
        stop_process(server2)
        stop_process(proc)
