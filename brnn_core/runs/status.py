"""status.json, typed: the one reader and the one writer of a run's status (fields: docs/run-directory.md).

`RunStatus` is a read-only mapping over the file's object with typed accessors; `updated()` accepts only the
documented fields, while unknown keys found in a file (an older or newer version's) are kept on rewrite.
A file that is not a JSON object reads as a damaged status (`damaged` says why), never as an exception.
`update_status` is the only code that writes the file, for the training session and for the driver side
(runs.lifecycle) alike: each change is a read-modify-write under the run's status lock, so changes made at
once by any number of processes are all kept. Readers take no lock: every write is an atomic rename.
`effective_status` adds what only the reader can know: an active run whose worker is gone is `interrupted`.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from brnn_core.fileio import atomic_write_json
from brnn_core.locks import holding
from brnn_core.states import ACTIVE_STATES, State

# Every key a worker, a job or a sweep writes, with the JSON types its value may have (None is always allowed).
NUMBER = (int, float)
FIELDS: dict[str, tuple[type, ...]] = {
    "state": (str,), "message": (str,), "created": NUMBER, "started": NUMBER, "ended": NUMBER, "updated": NUMBER,
    "pid": (int,), "pid_started": NUMBER, "host": (str,), "heartbeat": NUMBER, "ray_node": (str,),
    "step": (int,), "epoch": (int,), "batch": (int,), "steps_per_epoch": (int,), "total_steps": (int,),
    "steps_done": (int,), "elapsed_s": NUMBER, "samples_per_s": NUMBER, "loss": NUMBER, "val_loss": NUMBER,
    "val_acc": NUMBER, "test_loss": NUMBER, "test_acc": NUMBER, "skipped_steps": (int,), "live": (dict,),
    "control_offset": (int,), "stopped_by": (str,), "pruned": (dict,), "damaged": (str,),
    "queued_at": NUMBER, "slot": (str,),  # the run's place in the queue and the device it took (runs.job_queue)
}
STATUS_LOCK = ".status.lock"  # beside status.json: held for each read-modify-write
QUEUED_GRACE_S = 60.0  # a run created but never picked up by a worker for this long is dead
# A worker on another machine (a sweep trial on a cluster node, the runs folder on shared storage): its pid
# means nothing here, so it is alive while its heartbeat (every few seconds while it trains or waits) is
# this fresh; long enough for a validation pass on a slow node, short enough to notice a lost node.
REMOTE_STALE_S = 300.0
INTERRUPTED_MESSAGE = "the worker stopped without saying why (killed or crashed); resume continues from the last " \
                      "checkpoint"


class RunStatus(Mapping):
    """One status.json: `status.get("step")` as before, `status.step` typed; `updated(**fields)` for a rewrite."""

    def __init__(self, data: Mapping[str, Any] | None = None):
        self._data = dict(data or {})

    @classmethod
    def read(cls, path: Path) -> RunStatus:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return cls.damaged_by(f"status.json cannot be read ({type(exc).__name__})")
        if not isinstance(data, dict):
            return cls.damaged_by(f"status.json holds a JSON {type(data).__name__}, not an object")
        return cls(data)

    @classmethod
    def damaged_by(cls, why: str) -> RunStatus:
        return cls({"state": State.INTERRUPTED, "damaged": why,
                    "message": f"{why}; resume continues from the last checkpoint"})

    def updated(self, **changes: Any) -> RunStatus:
        """A copy with `changes` (documented fields only), stamped with the time; a damaged note is dropped."""
        for name, value in changes.items():
            kinds = FIELDS.get(name)
            if kinds is None:
                raise TypeError(f"status.json has no field {name!r} (docs/run-directory.md lists them)")
            if value is not None and not isinstance(value, kinds):
                raise TypeError(f"status.json field {name!r} takes {'/'.join(k.__name__ for k in kinds)}, "
                                f"not {type(value).__name__}")
        data = {k: v for k, v in self._data.items() if k != "damaged"}
        return RunStatus({**data, **changes, "updated": time.time()})

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    # Mapping: pages and the CLI read it like the dict it is on disk
    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # typed fields
    @property
    def state(self) -> str:
        return str(self._data.get("state") or State.INTERRUPTED)

    @property
    def step(self) -> int:
        return int(self._data.get("step") or 0)

    @property
    def elapsed_s(self) -> float:
        return float(self._data.get("elapsed_s") or 0.0)

    @property
    def control_offset(self) -> int:
        return int(self._data.get("control_offset") or 0)

    @property
    def live(self) -> dict:
        live = self._data.get("live")
        return dict(live) if isinstance(live, dict) else {}

    @property
    def damaged(self) -> str | None:
        return self._data.get("damaged")


def update_status(path: Path, *, derive: Callable[[RunStatus], dict] | None = None, last_resort: bool = False,
                  **changes: Any) -> dict:
    """Read, change and atomically rewrite one status.json under its run's status lock; returns what was written.

    `derive(current)` gives more changes computed from the status as it is under the lock (a record merged into
    `pruned`, a start time kept), so another process's change made meanwhile is never overwritten. `last_resort`:
    on a full disk, rewrite it in place (an atomic rewrite needs room for a second copy), for the one write that
    must get through: how the run ended."""
    path = Path(path)
    with holding(path.with_name(STATUS_LOCK), path.parent.parent):
        current = RunStatus.read(path)
        status = current.updated(**changes, **(derive(current) if derive else {})).to_dict()
        _store(path, status, last_resort)
    return status


def new_status(path: Path, **fields: Any) -> dict:
    """The first status.json of a folder that nobody else sees yet (one being created, before its rename)."""
    status = RunStatus().updated(**fields).to_dict()
    _store(Path(path), status)
    return status


def _store(path: Path, status: dict, last_resort: bool = False) -> None:
    """Every status.json write in brnn_core is this one."""
    try:
        atomic_write_json(path, status)
    except OSError:
        if not last_resort:
            raise
        path.write_text(json.dumps(status, default=str))


def effective_status(status: dict) -> dict:
    """`status` (a status.json's content, changed in place) with an active run whose worker is gone `interrupted`."""
    state = status.get("state", State.INTERRUPTED)
    if state in ACTIVE_STATES and not worker_alive(status):
        status["state"] = State.INTERRUPTED
        status["message"] = INTERRUPTED_MESSAGE
    return status


def last_pt_pruned(status: Mapping) -> bool:
    """True when a sweep removed this run's last.pt to save disk (sweep/disk.py records it in status.json)."""
    return bool((status.get("pruned") or {}).get("last.pt"))


def sweep_driver_alive(record: Mapping) -> bool:
    """True while a sweep record (sweep.json) says running and its driver process still runs; a sweep has no
    queued grace: its driver writes the record itself."""
    return record.get("state") == State.RUNNING and worker_alive({**record, "created": 0})


def worker_alive(status: Mapping) -> bool:
    """True while the process named in status.json is the live worker of this run."""
    pid = status.get("pid")
    if not pid:
        return time.time() - float(status.get("created", 0) or 0) < QUEUED_GRACE_S
    host = status.get("host")
    if host and host != socket.gethostname():
        return time.time() - float(status.get("heartbeat") or 0) < REMOTE_STALE_S
    try:
        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = status.get("pid_started")
        return started is None or abs(proc.create_time() - float(started)) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False
