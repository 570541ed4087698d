"""A storm of 200 commands at a training worker: no deadlock, every command acknowledged once and in order,
the last lr applied, and the run still stops cleanly."""

from __future__ import annotations

import contextlib
import random
import time

import pytest
from helpers import metric_lines, tiny_config, wait_for, worker_environ

from brnn_core.checkpoint import load_checkpoint
from brnn_core.runs import jobs


@pytest.mark.worker
@pytest.mark.slow
def test_storm_of_200_commands_no_deadlock_none_lost_or_reordered(tmp_path, monkeypatch, idx_data):
    runs_dir = tmp_path / "runs"
    rng = random.Random(1234)
    proc = None
    try:
        with worker_environ(monkeypatch):
            run, proc = jobs.start_worker(runs_dir, tiny_config(dataset="mnist"), data_dir=idx_data)
        wait_for(lambda: (run.stored_status().get("state") == "running" and metric_lines(run))
                   or proc.poll() is not None, 300, "the worker to train")
        assert proc.poll() is None, (run.path / "worker.log").read_text()[-3000:]
        sent, last_lr = [], None
        for _ in range(200):
            kind = rng.choice(["pause", "resume", "lr", "lr", "bad-lr", "clip"])
            if kind == "lr":
                last_lr = round(rng.uniform(1e-4, 1e-2), 6)
                sent.append(run.send_command("set", field="lr", value=last_lr))
            elif kind == "bad-lr":
                sent.append(run.send_command("set", field="lr", value=-1))  # refused, but acknowledged
            elif kind == "clip":
                sent.append(run.send_command("set", field="grad_clip", value=rng.choice([0.0, 1.0, 5.0])))
            else:
                sent.append(run.send_command(kind))
            time.sleep(rng.uniform(0, 0.02))  # 200 commands in about two seconds
        sent.append(run.send_command("resume"))

        def acked() -> list[str]:
            return [e["command"] for e in run.events() if e.get("command")]

        wait_for(lambda: len(acked()) >= len(sent) or proc.poll() is not None, 180,
                   "every command to be acknowledged (a deadlock if this never happens)")
        assert acked() == sent, "a command was lost, repeated or reordered"
        events = {e["command"]: e for e in run.events() if e.get("command")}
        assert events[sent[-1]]["kind"] == "resume"
        assert sum(1 for cid in sent if events[cid]["kind"] == "warning") >= 1  # the refused lr values
        assert run.stored_status()["live"]["lr"] == last_lr
        rows = len(metric_lines(run))
        wait_for(lambda: len(metric_lines(run)) > rows, 120, "training to go on after the storm")
        assert float(metric_lines(run)[-1].split(b",")[5]) == pytest.approx(last_lr, rel=1e-5)

        stop = run.send_command("stop")
        assert proc.wait(180) == 0
        status = run.status()
        assert status["state"] == "stopped", status
        assert acked()[-1] == stop and load_checkpoint(run.last_ckpt).step == status["step"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(30)
