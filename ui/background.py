"""One background thread per job kind on the server: jobs asked for by key, each run once, one at a time.

Not a daemon: a daemon thread still inside torch when the interpreter tears down aborts the whole process
("terminate called without an active exception"). Once the main thread has ended (Ctrl-C, SIGTERM) the thread
finishes the job in hand, which writes its files whole (atomic_write), and exits; the rest waits for a new server.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Hashable

POLL_S = 0.2  # how soon an idle thread notices that the server is ending


class BackgroundJobs:
    """`ask(key, job)` runs `job()` on this object's thread unless a job of that key is queued or running."""

    def __init__(self, name: str, expected: tuple[type[BaseException], ...] = ()):
        self._queue: queue.Queue = queue.Queue()
        self._pending: set[Hashable] = set()
        self._lock = threading.Lock()
        self._expected = expected  # failures a job may end with (its caller shows why elsewhere)
        self.thread = threading.Thread(target=self._work, name=name, daemon=False)
        self.thread.start()

    def ask(self, key: Hashable, job: Callable[[], object]) -> None:
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)
        self._queue.put((key, job))

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _work(self) -> None:
        while threading.main_thread().is_alive():
            try:
                key, job = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                continue
            try:
                job()
            except self._expected:
                pass
            finally:
                with self._lock:
                    self._pending.discard(key)
