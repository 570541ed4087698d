"""Two Start clicks at once (threads of one registry, or two browser tabs). With the same settings exactly one
run starts: the same seed trains the same run, so the other click is a double click, refused naming the run it
repeats. With other settings (another seed) the second run is queued: it waits while the first trains, so two
runs never train at once on one device. No half-created run is left behind."""

from __future__ import annotations

import threading

import pytest
from helpers import (
    app_test,
    assert_no_half_runs,
    kill_workers,
    texts,
    tiny_config,
    wait_for,
    wait_for_state,
    worker_environ,
)

from brnn_core.runs.jobs import DuplicateRun, JobRegistry
from brnn_core.runs.rundir import Run, RunError


@pytest.mark.worker
@pytest.mark.slow
def test_concurrent_starts_start_exactly_one_run(tmp_path, monkeypatch, idx_data):
    runs_dir = tmp_path / "runs"
    registry = JobRegistry()
    clicks = 6
    barrier = threading.Barrier(clicks)
    results: list = []

    def click() -> None:
        barrier.wait()
        try:
            results.append(registry.start(runs_dir, tiny_config(dataset="mnist"), data_dir=idx_data))
        except RunError as exc:
            results.append(exc)

    try:
        with worker_environ(monkeypatch):
            threads = [threading.Thread(target=click) for _ in range(clicks)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        started = [r for r in results if isinstance(r, Run)]
        refused = [r for r in results if isinstance(r, RunError)]
        assert len(results) == clicks and len(started) == 1, results
        assert all(isinstance(e, DuplicateRun) and e.run_id == started[0].id and "exactly these settings" in str(e)
                   for e in refused) and len(refused) == clicks - 1, refused
        assert [r.id for r in assert_no_half_runs(runs_dir)] == [started[0].id]
        assert registry.process(started[0].id) is not None
    finally:
        kill_workers(runs_dir)
    wait_for(lambda: registry.process(started[0].id) is None, 60, "the registry to reap the killed worker")


@pytest.mark.worker
@pytest.mark.slow
def test_two_tabs_clicking_start_start_one_run(tmp_path, monkeypatch, idx_data):
    """Two sessions that both show an enabled Start button; both click it."""
    runs_dir = tmp_path / "runs"
    tabs = [app_test(monkeypatch, runs_dir, idx_data), app_test(monkeypatch, runs_dir, idx_data)]
    try:
        with worker_environ(monkeypatch):
            for at in tabs:
                at.run()
                at.number_input(key="w_hidden_size").set_value(8)
                at.number_input(key="w_num_layers").set_value(1)
                at.run()
                assert not next(b for b in at.button if b.label == "Start training").disabled
            for at in tabs:
                next(b for b in at.button if b.label == "Start training").click().run()
                assert not at.exception, texts(at.exception)
        runs = assert_no_half_runs(runs_dir)
        assert len(runs) == 1, [r.id for r in runs]
        # started, or queued behind the server's background drawing of the default dataset's digits
        assert any(f"Started run {runs[0].id}" in s or f"Queued {runs[0].id}" in s for s in texts(tabs[0].success)), \
            texts(tabs[0].success)
        assert any("Not started" in e and runs[0].id in e and "exactly these settings" in e
                   for e in texts(tabs[1].error)), texts(tabs[1].error)
        assert tabs[1].sidebar.selectbox(key="run_picker").value == runs[0].id  # the tab shows the run it repeats
    finally:
        kill_workers(runs_dir)


@pytest.mark.worker
@pytest.mark.slow
def test_a_second_start_with_another_seed_waits_while_the_first_trains(tmp_path, monkeypatch, idx_data):
    runs_dir = tmp_path / "runs"
    registry = JobRegistry()
    try:
        with worker_environ(monkeypatch):
            first = registry.start(runs_dir, tiny_config(dataset="mnist"), data_dir=idx_data)
            second = registry.start(runs_dir, tiny_config(dataset="mnist", seed=1, epochs=1), data_dir=idx_data)
            wait_for_state(first, "running", 180)
            said = f"queued: 1st in line, behind run {first.id} on cpu"
            wait_for(lambda: second.status().get("message") == said, 120, "the second run to wait behind the first")
            assert second.status()["state"] == "queued" and second.metrics().empty
            first.send_command("stop")
            wait_for_state(second, "finished", 300)
        assert second.status()["started"] >= first.status()["ended"]
    finally:
        kill_workers(runs_dir)
