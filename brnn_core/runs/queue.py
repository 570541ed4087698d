"""The run queue: one training job per device, the oldest waiting run first (docs/run-directory.md, "The queue").

A queued run's own worker process is its queue entry: status.json says `queued` with its pid and `queued_at`,
and `wait_turn` holds it there until its device is free. A device is a slot, an advisory lock on
RUNS/.devices/<slot>.lock (cpu, cuda-0, cuda-1, ..., mps) held for the whole training; the kernel drops it when
its holder dies, so a killed worker frees its device for the next run. While a sweep runs it has the machine.
Without fcntl (Windows) every slot reads free.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from brnn_core.fileio import read_json
from brnn_core.runs import lifecycle
from brnn_core.runs.rundir import Run
from brnn_core.runs.status import RunStatus, sweep_driver_alive, worker_alive
from brnn_core.states import ACTIVE_STATES, State

SLOTS_DIR = ".devices"
POLL_S = 0.5  # how often a waiting run looks again (a status.json read per queued run in the folder)
HEARTBEAT_S = 20.0  # a waiting run's status is rewritten at least this often (for watchers on other machines)


class Cancelled(Exception):
    """The run left the queue before it trained (a stop sent to it, or Ctrl-C); `control_offset`: the control
    channel read up to here (the stop is answered, a later worker must not apply it again), `command`: its id."""

    def __init__(self, why: str, control_offset: int | None = None, command: str | None = None):
        super().__init__(why)
        self.control_offset, self.command = control_offset, command


@dataclass(frozen=True)
class Machine:
    """The devices of this machine that runs can take turns on."""

    gpus: int = 0
    mps: bool = False

    @classmethod
    def here(cls) -> Machine:
        import torch  # lazy: the pages and the CLI's other commands need none of it

        from brnn_core.devices import mps_available
        return cls(torch.cuda.device_count(), mps_available())


def slots_for(device: str | None, machine: Machine) -> tuple[str, ...]:
    """The slots a run with this device setting may take: `auto` and `cuda` any GPU, `auto` on a machine
    without one the Apple GPU or the CPU, `cuda:N` that GPU only."""
    spec = str(device or "auto").strip().lower()
    gpus = tuple(f"cuda-{i}" for i in range(machine.gpus))
    if spec == "auto":
        return gpus or (("mps",) if machine.mps else ("cpu",))
    if spec == "cuda":
        return gpus or ("cuda-0",)
    return (re.sub(r"[^a-z0-9]+", "-", spec).strip("-") or "cpu",)  # cuda:1 -> cuda-1; a file name in any case


def slot_device(slot: str) -> str:
    """The torch device spec a slot trains on: cuda-1 -> cuda:1."""
    return f"cuda:{slot[5:]}" if slot.startswith("cuda-") else slot


# ---------------------------------------------------------------- the slots' locks
class SlotLock:
    """One device slot, held until `release()` (or until the holding process dies)."""

    def __init__(self, slot: str, handle):
        self.slot, self._handle = slot, handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the file drops the lock
            self._handle = None


def try_take(runs_dir: Path, slot: str) -> SlotLock | None:
    """Take `slot` if no other process holds it (None when one does)."""
    try:
        import fcntl
    except ImportError:
        return SlotLock(slot, None)
    folder = Path(runs_dir) / SLOTS_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / f"{slot}.lock", "a")  # noqa: SIM115 (held open for the lock's lifetime)
    except OSError:  # a runs folder we cannot write: the run fails on its own first write and says why
        return SlotLock(slot, None)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return SlotLock(slot, handle)


# ---------------------------------------------------------------- who waits, who trains
@dataclass(frozen=True)
class Entry:
    """A run waiting in the queue."""

    run_id: str
    queued_at: float
    slots: tuple[str, ...]


@dataclass(frozen=True)
class View:
    """The queue as the folder holds it now: the waiting runs, oldest first, and which run trains on which slot."""

    waiting: tuple[Entry, ...]
    holders: dict[str, str]


def read_status(path: Path, cache: dict | None) -> RunStatus | None:
    """A run folder's status.json, parsed again only when its size or modification time changed (`cache`)."""
    try:
        stat = (path / "status.json").stat()
    except OSError:
        return None
    key = (stat.st_mtime_ns, stat.st_size)
    hit = cache.get(path) if cache is not None else None
    if hit is None or hit[0] != key:
        hit = (key, RunStatus.read(path / "status.json"))
        if cache is not None:
            cache[path] = hit
    return hit[1]


def scan(runs_dir: Path, machine: Machine, cache: dict | None = None) -> View:
    """Every run's status (re-read only where it changed, with a `cache` kept between scans): the live queued
    runs, with the slots their config asks for, and the live runs that hold a slot."""
    waiting, holders = [], {}
    for path in sorted(Path(runs_dir).iterdir()) if Path(runs_dir).is_dir() else []:
        status = None if path.name.startswith(".") else read_status(path, cache)
        if status is None or status.state not in ACTIVE_STATES or not worker_alive(status):
            continue
        if status.get("slot"):
            holders[status["slot"]] = path.name
        elif status.state == State.QUEUED and status.get("queued_at") is not None:
            queued_at = float(status["queued_at"])
            waiting.append(Entry(path.name, queued_at, slots_for(queued_device(path, queued_at, cache), machine)))
    return View(tuple(sorted(waiting, key=lambda e: (e.queued_at, e.run_id))), holders)


def queued_device(path: Path, queued_at: float, cache: dict | None = None) -> str | None:
    """The device a queued run's config.json asks for, read once per time it joins the queue with a `cache`: it is
    written before the run joins and not changed while it waits."""
    key = ("device", path.name, queued_at)
    if cache is not None and key in cache:
        return cache[key]
    device = ((read_json(path / "config.json", {}) or {}).get("train") or {}).get("device")
    if cache is not None:
        cache[key] = device
    return device


def ahead_of(me: Entry, view: View) -> list[Entry]:
    """The runs queued before `me` that want one of its slots, oldest first."""
    wanted = set(me.slots)
    return [e for e in view.waiting if (e.queued_at, e.run_id) < (me.queued_at, me.run_id) and wanted & set(e.slots)]


def open_slots(me: Entry, view: View) -> tuple[str, ...]:
    """The slots `me` may try now: its own, less those an older waiting run wants (first come, first served)."""
    claimed = {slot for e in ahead_of(me, view) for slot in e.slots}
    return tuple(slot for slot in me.slots if slot not in claimed)


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def place(me: Entry, view: View, blocked: str | None = None) -> str:
    """Where `me` stands, e.g. 'queued: 2nd in line, behind run X on cpu'."""
    ahead = ahead_of(me, view)
    where = "/".join(me.slots) if len(me.slots) <= 2 else "a GPU"
    if ahead:
        behind = f"behind run {ahead[-1].run_id} on {where}"
    elif blocked:
        behind = f"for {where}: {blocked}"
    else:
        trains = [view.holders[slot] for slot in me.slots if slot in view.holders]
        behind = f"behind run {trains[0]} on {where}" if trains else f"for {where} (held by another process)"
    return f"queued: {ordinal(len(ahead) + 1)} in line, {behind}"


def sweep_running(runs_dir: Path) -> str | None:
    """A sweep whose driver is alive takes the whole machine (its record: RUNS/sweeps/<id>/sweep.json)."""
    for path in sorted((Path(runs_dir) / "sweeps").glob("*/sweep.json")):
        info = read_json(path, {})
        if isinstance(info, dict) and sweep_driver_alive(info):
            return f"sweep {path.parent.name} is running"
    return None


# ---------------------------------------------------------------- waiting for a turn
@contextlib.contextmanager
def wait_turn(run: Run, machine: Machine, *, cancelled: Callable[[], None] = lambda: None,
              say: Callable[[str], None] = lambda message: None, poll_s: float = POLL_S) -> Iterator[str]:
    """Queue `run` (this process is its entry), wait until it is the oldest waiting run whose device is free,
    and hold that device for the block; yields the device spec to train on.

    `cancelled()` raises Cancelled when the run should leave the queue. Then, as after Ctrl-C (KeyboardInterrupt,
    raised again), the run ends `stopped` ("cancelled while queued"): it never trained, so nothing is lost."""
    runs_dir = run.path.parent
    me = Entry(run.id, lifecycle.joined_queue(run, os.getpid()),
               slots_for((run.config().get("train") or {}).get("device"), machine))
    said, written, lock, seen = None, time.monotonic(), None, {}
    try:
        while lock is None:
            cancelled()
            view, blocked = scan(runs_dir, machine, seen), sweep_running(runs_dir)
            for slot in () if blocked else open_slots(me, view):
                lock = try_take(runs_dir, slot)
                if lock is not None:
                    break
            if lock is None:
                message = place(me, view, blocked)
                if message != said or time.monotonic() - written > HEARTBEAT_S:
                    lifecycle.still_queued(run, message)
                    written = time.monotonic()
                if message != said:
                    say(message)
                    said = message
                time.sleep(poll_s)
    except KeyboardInterrupt:
        lifecycle.cancelled_while_queued(run, "cancelled while queued (Ctrl-C)")
        raise
    except Cancelled as exc:
        lifecycle.cancelled_while_queued(run, str(exc), exc.control_offset, exc.command)
        raise
    try:
        lifecycle.took_slot(run, lock.slot)
        yield slot_device(lock.slot)
    finally:
        lock.release()
