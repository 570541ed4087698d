"""The queue: every job that trains or holds a device waits here for its turn, one job per device slot, the oldest
waiting job first (docs/run-directory.md, "The queue").

A queue entry is a folder with a status.json: a run directory, or for what is not a run (an lr range test, a
predraw, a sweep's driver) a job folder RUNS/.jobs/<id>/ whose job.json says what it is and which device it asks
for. The waiting process is its entry: status.json says `queued` with its pid and `queued_at`, and `wait_turn`
holds it there until its slots are free. A slot is a lock on RUNS/.devices/<slot>.lock (cpu, cuda-0, cuda-1, ...,
mps; brnn_core.locks) held for the whole job; the kernel drops it when its holder dies, so a killed job frees its
device for the next. A sweep asks for every slot of the machine. A slot whose lock cannot be taken is not free:
the job waits, and its status says why and what mends it. `busy` is the one answer to "is the machine busy".
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from brnn_core.fileio import atomic_write_json, read_json
from brnn_core.locks import LockError, try_lock
from brnn_core.runs import lifecycle
from brnn_core.runs.rundir import Run, create_folder, validate_run_id
from brnn_core.runs.status import RunStatus, worker_alive
from brnn_core.states import ACTIVE_STATES, State

SLOTS_DIR = ".devices"
JOBS_DIR = ".jobs"  # job folders: queue entries that are not runs
JOB_FILE = "job.json"
EVERY_SLOT = "machine"  # the device a sweep asks for: all of them
POLL_S = 0.5  # how often a waiting job looks again (a status.json read per queued job in the folder)
QUEUED_HEARTBEAT_S = 20.0  # a waiting job's status is rewritten at least this often (for watchers on other machines)
KEPT_JOBS = 10  # ended job folders kept (another browser session may still show one's result); older ones go


class Cancelled(Exception):
    """The job left the queue before its turn (a stop sent to it, or Ctrl-C); `control_offset`: the control
    channel read up to here (the stop is answered, a later worker must not apply it again), `command`: its id."""

    def __init__(self, why: str, control_offset: int | None = None, command: str | None = None):
        super().__init__(why)
        self.control_offset, self.command = control_offset, command


@dataclass(frozen=True)
class Machine:
    """The devices of this machine that jobs can take turns on."""

    gpus: int = 0
    mps: bool = False

    @classmethod
    def here(cls) -> Machine:
        import torch  # lazy: the pages and the CLI's other commands need none of it

        from brnn_core.devices import mps_available
        return cls(torch.cuda.device_count(), mps_available())

    def every_slot(self) -> tuple[str, ...]:
        return (*(f"cuda-{i}" for i in range(self.gpus)), *(("mps",) if self.mps else ()), "cpu")


def slots_for(device: str | None, machine: Machine) -> tuple[str, ...]:
    """The slots a job with this device setting may take: `auto` and `cuda` any GPU, `auto` on a machine
    without one the Apple GPU or the CPU, `cuda:N` that GPU only, `machine` (a sweep) all of them at once."""
    spec = str(device or "auto").strip().lower()
    gpus = tuple(f"cuda-{i}" for i in range(machine.gpus))
    if spec == EVERY_SLOT:
        return machine.every_slot()
    if spec == "auto":
        return gpus or (("mps",) if machine.mps else ("cpu",))
    if spec == "cuda":
        return gpus or ("cuda-0",)
    return (re.sub(r"[^a-z0-9]+", "-", spec).strip("-") or "cpu",)  # cuda:1 -> cuda-1; a file name in any case


def slot_device(slot: str) -> str:
    """The torch device spec a slot trains on: cuda-1 -> cuda:1."""
    return f"cuda:{slot[5:]}" if slot.startswith("cuda-") else slot


def try_take(runs_dir: Path, slot: str) -> FileLock | None:
    """Take `slot` if no other holder has it (None when one does); LockError when its lock file cannot be used,
    which leaves the slot taken by nobody and free for nobody."""
    folder = Path(runs_dir) / SLOTS_DIR
    if not folder.is_symlink():  # a link is refused (with its message) by try_lock, never followed by mkdir
        with contextlib.suppress(FileExistsError):
            folder.mkdir(parents=True, exist_ok=True)
    return try_lock(folder / f"{slot}.lock", runs_dir)


# ---------------------------------------------------------------- job folders: queue entries that are not runs
def new_job(runs_dir: Path, kind: str, device: str, *, title: str | None = None, **info) -> Run:
    """A job folder RUNS/.jobs/<kind>-<random>/ for a job that is not a run, created whole (as a run directory is,
    with status.json `queued`); its job.json holds its kind, device, `title` (what the queue calls it: 'sweep X')
    and `info`."""
    tidy_jobs(runs_dir)
    description = {"kind": kind, "device": device, "title": title or kind, "created": time.time(), **info}
    return create_folder(Path(runs_dir) / JOBS_DIR, validate_run_id(f"{kind}-{secrets.token_hex(4)}"),
                         lambda job: atomic_write_json(job.path / JOB_FILE, description))


def job_info(folder: Path) -> dict:
    info = read_json(Path(folder) / JOB_FILE, {})
    return info if isinstance(info, dict) else {}


def tidy_jobs(runs_dir: Path, keep: int = KEPT_JOBS) -> None:
    """Remove ended job folders but the `keep` newest (a live or waiting job's folder always stays)."""
    root = Path(runs_dir) / JOBS_DIR
    ended = [p for p in (root.iterdir() if root.is_dir() and not root.is_symlink() else ())
             if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
             and Run(p).status().get("state") not in ACTIVE_STATES]
    ended.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for path in ended[keep:]:
        for file in path.iterdir():
            with contextlib.suppress(OSError):
                file.unlink()
        with contextlib.suppress(OSError):
            path.rmdir()


# ---------------------------------------------------------------- who waits, who holds
@dataclass(frozen=True)
class QueuedJob:
    """A job waiting in the queue: `every` when it needs all of `slots` at once (a sweep), else any one; `label`
    is what the queue calls it ('run X', 'sweep Y')."""

    job_id: str
    queued_at: float
    slots: tuple[str, ...]
    label: str = ""
    every: bool = False


@dataclass(frozen=True)
class View:
    """The queue as the folder holds it now: the waiting jobs, oldest first, and which job holds which slot."""

    waiting: tuple[QueuedJob, ...]
    holders: dict[str, str]  # slot -> the label of its holder ("run 2026...")


def read_status(path: Path, cache: dict | None) -> RunStatus | None:
    """A folder's status.json, parsed again only when its size or modification time changed (`cache`)."""
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


def entries(runs_dir: Path) -> Iterator[tuple[Path, str, str]]:
    """(folder, kind, label) of every possible queue entry: the run directories, then the job folders."""
    runs_dir = Path(runs_dir)
    for path in sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []:
        if not path.name.startswith(".") and path.is_dir():
            yield path, "run", f"run {path.name}"
    jobs = runs_dir / JOBS_DIR
    for path in sorted(jobs.iterdir()) if jobs.is_dir() and not jobs.is_symlink() else []:
        if not path.name.startswith("."):
            yield path, *describe(path)


def describe(folder: Path) -> tuple[str, str]:
    """A job folder's (kind, label)."""
    info = job_info(folder)
    kind = str(info.get("kind") or "job")
    return kind, str(info.get("title") or kind)


def scan(runs_dir: Path, machine: Machine, cache: dict | None = None) -> View:
    """Every entry's status (re-read only where it changed, with a `cache` kept between scans): the live queued
    jobs, with the slots they ask for, and the live jobs that hold slots."""
    waiting, holders = [], {}
    for path, kind, label in entries(runs_dir):
        status = read_status(path, cache)
        if status is None or status.state not in ACTIVE_STATES or not worker_alive(status):
            continue
        if status.get("slot"):
            holders.update({slot: label for slot in str(status["slot"]).split("+")})
        elif status.state == State.QUEUED and status.get("queued_at") is not None:
            queued_at = float(status["queued_at"])
            device = queued_device(path, kind, queued_at, cache)
            waiting.append(QueuedJob(path.name, queued_at, slots_for(device, machine), label, device == EVERY_SLOT))
    return View(tuple(sorted(waiting, key=lambda e: (e.queued_at, e.job_id))), holders)


def queued_device(path: Path, kind: str, queued_at: float, cache: dict | None = None) -> str | None:
    """The device a queued entry asks for (a run's config.json, a job's job.json), read once per time it joins the
    queue with a `cache`: it is written before the entry joins and not changed while it waits."""
    key = ("device", path.name, queued_at)
    if cache is not None and key in cache:
        return cache[key]
    if kind == "run":
        device = ((read_json(path / "config.json", {}) or {}).get("train") or {}).get("device")
    else:
        device = job_info(path).get("device")
    if cache is not None:
        cache[key] = device
    return device


def ahead_of(me: QueuedJob, view: View) -> list[QueuedJob]:
    """The jobs queued before `me` that want one of its slots, oldest first."""
    wanted = set(me.slots)
    return [e for e in view.waiting if (e.queued_at, e.job_id) < (me.queued_at, me.job_id) and wanted & set(e.slots)]


def open_slots(me: QueuedJob, view: View) -> tuple[str, ...]:
    """The slots `me` may try now: its own, less those an older waiting job wants (first come, first served)."""
    claimed = {slot for e in ahead_of(me, view) for slot in e.slots}
    return tuple(slot for slot in me.slots if slot not in claimed)


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def place(me: QueuedJob, view: View, blocked: str | None = None) -> str:
    """Where `me` stands, e.g. 'queued: 2nd in line, behind run X on cpu'."""
    ahead = ahead_of(me, view)
    where = "/".join(me.slots) if len(me.slots) <= 2 or me.every else "a GPU"
    if ahead:
        behind = f"behind {ahead[-1].label} on {where}"
    elif blocked:
        behind = f"for {where}: {blocked}"
    else:
        holds = [view.holders[slot] for slot in me.slots if slot in view.holders]
        behind = f"behind {holds[0]} on {where}" if holds else f"for {where} (held by another process)"
    return f"queued: {ordinal(len(ahead) + 1)} in line, {behind}"


def busy(runs_dir: Path) -> str | None:
    """Is the machine busy? What a new job would wait behind: a held device slot (the locks are the truth; the
    statuses name their holders: 'run X is training on cpu'), else the oldest waiting job ('run X is queued');
    None when nothing holds or waits."""
    view = scan(runs_dir, Machine())
    folder = Path(runs_dir) / SLOTS_DIR
    for path in sorted(folder.glob("*.lock")) if folder.is_dir() and not folder.is_symlink() else []:
        try:
            lock = try_lock(path, runs_dir)
        except (LockError, FileNotFoundError) as exc:
            return f"{path.stem} cannot be taken: {exc}"
        if lock is not None:
            lock.release()
            continue
        holder = view.holders.get(path.stem)
        if holder is None:
            return f"{path.stem} is held by another process"
        return f"{holder} is {'training' if holder.startswith('run ') else 'running'} on {path.stem}"
    return f"{view.waiting[0].label} is queued" if view.waiting else None


# ---------------------------------------------------------------- waiting for a turn
def take(runs_dir: Path, me: QueuedJob, view: View) -> tuple[list[FileLock], str | None]:
    """The slot locks `me` gets now (one of its open slots, or all of them for `every`; [] when none) and why a
    slot could not be locked at all (None when every slot tried was merely busy)."""
    candidates = open_slots(me, view)
    if me.every and set(candidates) != set(me.slots):
        return [], None
    taken, blocked = [], None
    for slot in candidates:
        try:
            lock = try_take(runs_dir, slot)
        except (LockError, FileNotFoundError) as exc:
            lock, blocked = None, str(exc)
        if lock is not None:
            taken.append(lock)
            if not me.every:
                return taken, None
        elif me.every:
            break
    if me.every and len(taken) == len(me.slots):
        return taken, None
    for lock in taken:
        lock.release()
    return [], blocked


@dataclass(frozen=True)
class Turn:
    """A job's turn: the slots it holds and the torch device it runs on (the first slot's)."""

    slots: tuple[str, ...]

    @property
    def device(self) -> str:
        return slot_device(self.slots[0])


def where_queued(entry: Run) -> tuple[Path, str, str]:
    """(the runs folder whose queue `entry` joins, its kind, its label): a job folder sits in RUNS/.jobs/."""
    if entry.path.parent.name == JOBS_DIR:
        return entry.path.parent.parent, *describe(entry.path)
    return entry.path.parent, "run", f"run {entry.id}"


@contextlib.contextmanager
def wait_turn(entry: Run, machine: Machine, *, cancelled: Callable[[], None] = lambda: None,
              say: Callable[[str], None] = lambda message: None, poll_s: float = POLL_S,
              state: str = State.LOADING) -> Iterator[Turn]:
    """Queue `entry` (a run directory or a job folder; this process is its queue entry), wait until it is the
    oldest waiting job whose slots are free, and hold them for the block; `entry` is in `state` once its turn
    came.

    `cancelled()` raises Cancelled when the job should leave the queue. Then, as after Ctrl-C (KeyboardInterrupt,
    raised again), it ends `stopped` ("cancelled while queued"): it never ran, so nothing is lost."""
    runs_dir, kind, label = where_queued(entry)
    device = queued_device(entry.path, kind, 0.0)
    me = QueuedJob(entry.id, lifecycle.joined_queue(entry, os.getpid()), slots_for(device, machine), label,
                   device == EVERY_SLOT)
    said, written, locks, seen = None, time.monotonic(), [], {}
    try:
        while not locks:
            cancelled()
            view = scan(runs_dir, machine, seen)
            locks, blocked = take(runs_dir, me, view)
            if not locks:
                message = place(me, view, blocked)
                if message != said or time.monotonic() - written > QUEUED_HEARTBEAT_S:
                    lifecycle.still_queued(entry, message)
                    written = time.monotonic()
                if message != said:
                    say(message)
                    said = message
                time.sleep(poll_s)
    except KeyboardInterrupt:
        lifecycle.cancelled_while_queued(entry, "cancelled while queued (Ctrl-C)")
        raise
    except Cancelled as exc:
        lifecycle.cancelled_while_queued(entry, str(exc), exc.control_offset, exc.command)
        raise
    try:
        turn = Turn(tuple(Path(lock.lock_file).stem for lock in locks))
        lifecycle.took_slots(entry, turn.slots, state)
        yield turn
    finally:
        for lock in locks:
            lock.release()
