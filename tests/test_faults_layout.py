"""A flash message (e.g. "Stopping: saving a checkpoint first…") does not shift the page layout below it."""

from __future__ import annotations

import pytest
from helpers import app_test, fake_finished_run, texts


@pytest.mark.parametrize("page", [None, "pages/runs.py"])
def test_a_flash_message_does_not_shift_the_page_layout(tmp_path, monkeypatch, page):
    """Found by benchmarks/soak.py: a message inserted above the columns moved every element after it, and the
    browser kept the live panel's old copy on screen (two button rows, the stale one showing 'loading')."""
    runs_dir = tmp_path / "runs"
    fake_finished_run(runs_dir)
    at = app_test(monkeypatch, runs_dir, page=page)
    at.run()

    def layout() -> list:
        return [(key, type(child).__name__) for key, child in at.main.children.items()]

    before = layout()
    at.session_state["_flash"] = [("info", "Stopping: saving a checkpoint first…")]
    at.run()
    assert not at.exception, texts(at.exception)
    assert "Stopping: saving a checkpoint first…" in texts(at.info)
    assert layout() == before
