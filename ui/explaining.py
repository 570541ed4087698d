"""The Predict page's slow explanations (integrated gradients, the LSTM's insides), worked out off the script's
thread, so a stroke never waits behind the previous stroke's.

Why: in Streamlit a widget event inside a fragment does not interrupt the fragment's run in progress; it waits
until that run ends (fragment reruns never preempt a run, `script_requests`). A stroke whose run also computed
integrated gradients (a second or more on a trained model) kept the next stroke's run waiting that long, with the
previous drawing's input and answer on screen. So a stroke's run computes only the model input and the
prediction, and asks `Explainer` for the rest: one background thread per server, which skips what no session
still wants (an earlier stroke's), and keeps recent results for every session (they depend only on the
checkpoint file and the input). Until they are ready the page says it is working them out, and a small polling
fragment redraws the page once they are.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st

from brnn_core.inference.explain import Stopped
from ui.background import BackgroundJobs

POLL_S = 0.25  # how often a page waiting for an explanation looks for it
KEPT_RESULTS = 64  # explanations kept, newest first: a few sessions' current drawings with every panel open
KEPT_SESSIONS = 64  # sessions whose wishes are remembered; an older one asks again on its next run
_SESSION = "_explain_session"


@dataclass(frozen=True)
class Failed:
    """An explanation that could not be worked out, and why (shown in its place)."""

    message: str


Compute = Callable[[Callable[[], bool]], object]  # called with `stop`: True once nobody wants the result


class Explainer:
    """`want(session, key, compute)`: the result of `compute(stop)` if it is ready, else None and it is worked out
    on this object's thread. `begin(session)` starts a new set of wishes: what the session asked for before and is
    not asked for again is not worked out, and a computation that checks `stop()` ends early."""

    def __init__(self):
        self._lock = threading.Lock()
        self._results: OrderedDict[Hashable, object] = OrderedDict()
        self._wanted: OrderedDict[str, set[Hashable]] = OrderedDict()
        self.jobs = BackgroundJobs("explanations")

    def begin(self, session: str) -> None:
        with self._lock:
            self._wanted[session] = set()
            self._wanted.move_to_end(session)
            while len(self._wanted) > KEPT_SESSIONS:
                self._wanted.popitem(last=False)

    def want(self, session: str, key: Hashable, compute: Compute) -> object | None:
        with self._lock:
            self._wanted.setdefault(session, set()).add(key)
            if key in self._results:
                self._results.move_to_end(key)
                return self._results[key]
        self.jobs.ask(key, lambda: self._work_out(key, compute))
        return None

    def _still_wanted(self, key: Hashable) -> bool:
        with self._lock:
            return key not in self._results and any(key in keys for keys in self._wanted.values())

    def _work_out(self, key: Hashable, compute: Compute) -> None:
        if not self._still_wanted(key):  # an earlier stroke's: the drawing has changed since
            return
        try:
            result = compute(lambda: not self._still_wanted(key))
        except Stopped:
            return
        except Exception as exc:  # shown in the explanation's place; this thread serves every session, so it lives on
            result = Failed(f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._results[key] = result
            while len(self._results) > KEPT_RESULTS:
                self._results.popitem(last=False)


@st.cache_resource
def explainer() -> Explainer:
    return Explainer()  # one per server: thread-safe, shared by every session


class Explanations:
    """One page run's explanations of one drawing: `get(name, compute)` returns the result of `compute(stop)` or
    None (asked for in the background); `wait()` at the end polls until every None of this run is ready, then
    redraws the page."""

    def __init__(self, checkpoint: str, x: np.ndarray):
        self.session = st.session_state.setdefault(_SESSION, secrets.token_hex(8))
        self._base = (str(Path(checkpoint).resolve()), Path(checkpoint).stat().st_mtime_ns,
                      hashlib.sha1(np.ascontiguousarray(x, dtype=np.float32).tobytes()).hexdigest())
        self._asked: list[tuple[Hashable, Compute]] = []
        self._missing = 0
        explainer().begin(self.session)

    def get(self, name: tuple, compute: Compute):
        key = (*self._base, *name)
        self._asked.append((key, compute))
        result = explainer().want(self.session, key, compute)
        self._missing += result is None
        return result

    def wait(self) -> None:
        """While something asked for in this run is being worked out, look again every POLL_S; once all is
        there, rerun the page, which draws it (and ends this poll)."""
        if self._missing:
            st.fragment(run_every=POLL_S)(_poll)(self.session, self._asked)


def _poll(session: str, asked: list) -> None:
    if all(explainer().want(session, key, compute) is not None for key, compute in asked):
        st.rerun()


CHART_HEIGHT = 380  # the explanation charts' height (brnn_core.charts): a note in a chart's place keeps its room


def shown(container, result, what: str) -> bool:
    """True for an explanation ready to draw in `container`; else a note in its place: it is being worked out
    (the room of the chart it stands for, so the page below does not jump), or why it could not be."""
    if isinstance(result, Failed):
        container.warning(f"Could not work out {what}: {result.message}")
        return False
    if result is None:
        container.container(height=CHART_HEIGHT, border=False).caption(
            f":material/hourglass_top: Working out {what} for this drawing…")
        return False
    return True
