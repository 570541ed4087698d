"""Two Start clicks at once (threads of one registry, or two browser tabs): exactly one run starts, the
other click is refused naming it, and no half-created run is left behind."""

from __future__ import annotations

import threading

import pytest
from helpers import app_test, assert_no_half_runs, kill_workers, texts, tiny_config, wait_for, worker_environ

from brnn_core.runs.jobs import JobRegistry
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
        assert all("is still" in str(e) and started[0].id in str(e) for e in refused), refused
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
        assert any(f"Started run {runs[0].id}" in s for s in texts(tabs[0].success)), texts(tabs[0].success)
        assert any("Not started" in e and "is still" in e for e in texts(tabs[1].error)), texts(tabs[1].error)
    finally:
        kill_workers(runs_dir)
