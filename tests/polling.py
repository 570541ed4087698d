"""One polling helper for every test that waits on a real process (the machine may be busy)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def poll(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05):
    """Poll `predicate()` until it returns something truthy; fail naming `what` after `timeout` s.

    Waiting on state instead of sleeping keeps the tests free of wall-clock assumptions.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
