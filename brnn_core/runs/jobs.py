"""The front door: everything that trains or holds a device starts here, and waits in the one queue for its turn
(runs.job_queue). docs/architecture.md, "The front door", shows who calls what.

Runs (new ones, a seed group, a matrix of seed groups, a resume, a branch, Teach it's fine-tune) are checked and
queued by `new_runs`, `prepare_resume` and runs.branch, once for the dashboard, the CLI and Python alike. Then a
run trains either in a worker process of its own (`JobRegistry`: the dashboard's way, and a notebook's), or in
the caller's process (the CLI: training.worker.train_in_turn); both wait in the queue first. Jobs that are not
runs (an lr range test, a predraw, a sweep's driver) are job folders in the same queue (`JobRegistry.tool` starts
one; `in_turn` is how their own process waits, runs and records the end).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import LIVE_FIELDS, TrainConfig
from brnn_core.locks import LockError
from brnn_core.runs import job_queue, lifecycle, worker_lock
from brnn_core.runs.branch import create_branch
from brnn_core.runs.protocol import SET
from brnn_core.runs.retention import resume_problem as pruned_problem
from brnn_core.runs.rundir import Run, RunError, create_run, list_runs, new_run_config, write_problem
from brnn_core.runs.seeds import seed_configs
from brnn_core.states import ACTIVE_STATES, State
from brnn_core.text import plural

WORKER_MODULE = "brnn_core.training.worker"


class DuplicateRun(RunError):
    """A start of exactly the settings (seed included) of a run that is still queued or training."""

    def __init__(self, message: str, run_id: str):
        super().__init__(message)
        self.run_id = run_id


# ---------------------------------------------------------------- the checks, once
def new_runs(runs_dir: Path, cfgs: list[TrainConfig], data_dir: Path | None = None) -> list[Run]:
    """Run directories for `cfgs`, in that order, each `queued`; none when one is invalid or duplicates a run
    that is still queued or training (the same seed trains the same run: a second click, not an experiment)."""
    for cfg in cfgs:
        cfg.validate()
    active = {r.id: r.config().get("train") for r in list_runs(runs_dir) if r.status().get("state") in ACTIVE_STATES}
    for cfg in cfgs:
        same = next((run_id for run_id, train in active.items() if train == cfg.to_dict()), None)
        if same:
            raise DuplicateRun(f"run {same} has exactly these settings (seed {cfg.seed}) and is still queued or "
                               "training; change the seed to train another", same)
    return [create_run(runs_dir, new_run_config(cfg, data_dir)) for cfg in cfgs]


def resume_problem(run: Run, live: dict | None = None) -> str | None:
    """Why `run` cannot be resumed with the live changes `live` (None: it can), for every caller alike."""
    live = live or {}
    fixed = sorted(set(live) - set(LIVE_FIELDS))
    if fixed:
        return (f"a resume continues a run with its own config; only {', '.join(LIVE_FIELDS)} can change "
                f"(e.g. epochs=5), not {', '.join(fixed)}")
    linked = write_problem(run.path)  # a run linked in from elsewhere is read-only here
    if linked:
        return linked
    status = run.status()
    state = status.get("state")
    if state in ACTIVE_STATES:
        return f"run {run.id} is still {state}; stop it before resuming"
    try:
        if worker_lock.held(run.path):  # a live worker, whatever its (lost or rewritten) status.json says
            return f"run {run.id} is being trained by another live process; stop it before resuming"
    except LockError as exc:  # its worker lock cannot be taken: no worker could train it
        return str(exc)
    return finished_problem(run, status, live) or pruned_problem(run, status)


def finished_problem(run: Run, status: dict, live: dict) -> str | None:
    """Why resuming a finished run would do nothing but test it again (None: it trains more epochs)."""
    if status.get("state") != State.FINISHED:
        return None
    done = int(status.get("epoch") or 0)
    try:
        wanted = int(float(live["epochs"])) if "epochs" in live else done
    except ValueError:
        wanted = done  # the worker's own check words a bad value; here it only must not pass as more epochs
    if wanted > done:
        return None
    return (f"run {run.id} has finished its {plural(done, 'epoch')}, so resuming it would only test "
            f"it again; to train it longer, resume with more epochs (--resume {run.id} --set epochs={done + 1}), "
            f"or branch a new run from it (--from {run.id})")


def prepare_resume(run: Run, live: dict | None = None) -> Run:
    """Check the resume (RunError saying why not), send the live changes (applied, and logged, before its first
    step) and put the run back in the queue; its worker then waits its turn."""
    problem = resume_problem(run, live)
    if problem:
        raise RunError(problem)
    if run.last_ckpt.is_file():  # damaged or non-finite weights: refused (CheckpointError) before the run changes
        load_checkpoint(run.last_ckpt)
    for name, value in (live or {}).items():
        run.send_command(SET, field=name, value=value)
    lifecycle.queued_for_resume(run)
    return run


# ---------------------------------------------------------------- processes
def spawn(cmd: list[str], log_path: Path, env: dict[str, str], *, own_session: bool = True) -> subprocess.Popen:
    """Start a background process, its output appended to `log_path`; in a session of its own (a page's rerun or
    Ctrl-C never reaches it) unless `own_session` is False (it then ends with the server on Ctrl-C)."""
    with open(log_path, "ab") as log:
        # in the caller's folder, importing the same brnn_core as the caller
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=with_this_checkout(env), start_new_session=own_session, cwd=None)


def with_this_checkout(env: dict[str, str]) -> dict[str, str]:
    """`env`, plus the checkout this brnn_core runs from on PYTHONPATH when it is not installed: a dashboard
    started from another folder (`streamlit run /path/to/streamlit_app.py`) still finds it in its workers."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():  # installed: the child imports it as the caller does
        return env
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return env if str(root) in paths else {**env, "PYTHONPATH": os.pathsep.join([str(root), *paths])}


def job_environ(base: dict[str, str], data_dir: Path | None = None) -> dict[str, str]:
    """A background job's environment: `base` (the server's), the data folder and plain progress lines."""
    env = dict(base)
    if data_dir is not None:
        env["BRNN_DATA_DIR"] = str(data_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("BRNN_PROGRESS", "plain")
    return env


def worker_command(run_dir: Path, *, resume: bool = False) -> list[str]:
    """The worker's argument list (never a shell line: a run directory is one argument, whatever it holds)."""
    return [sys.executable, "-m", WORKER_MODULE, str(run_dir), *(["--resume"] if resume else [])]


def spawn_entry(entry: Run, cmd: list[str], log: Path, data_dir: Path | None = None, *,
                own_session: bool = True) -> subprocess.Popen:
    """Start the process of a queue entry (a run directory or a job folder) and record its pid there, so one that
    dies before its first word reads as interrupted."""
    proc = spawn(cmd, log, job_environ(os.environ, data_dir), own_session=own_session)
    try:
        started = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        started = None
    lifecycle.spawned(entry, proc.pid, started)
    return proc


def spawn_worker(run: Run, *, data_dir: Path | None = None, resume: bool = False) -> subprocess.Popen:
    """Start the worker of a queued run directory; its output goes to worker.log."""
    return spawn_entry(run, worker_command(run.path, resume=resume), run.path / "worker.log", data_dir)


def start_worker(runs_dir: Path, cfg: TrainConfig, *, data_dir: Path | None = None) -> tuple[Run, subprocess.Popen]:
    """One new run and its worker process (what `JobRegistry.start` does, for callers that keep the process)."""
    run = new_runs(runs_dir, [cfg], data_dir)[0]
    return run, spawn_worker(run, data_dir=data_dir)


# ---------------------------------------------------------------- jobs that are not runs, in their own process
def in_turn(job: Run, work: Callable[[job_queue.Turn], int], *, say: Callable[[str], None] = print,
            machine: job_queue.Machine | None = None) -> int:
    """Wait for `job`'s turn (a job folder: job_queue.new_job), run `work(turn)` there and record how it ended;
    its exit code (0 done). Ctrl-C while it waits leaves it `stopped`, never run."""
    with job_queue.wait_turn(job, machine or job_queue.Machine.here(), say=say, state=State.RUNNING) as turn:
        try:
            code = work(turn)
        except BaseException as exc:
            lifecycle.job_ended(job, State.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else State.FAILED,
                                f"{type(exc).__name__}: {exc}")
            raise
    lifecycle.job_ended(job, State.FINISHED if code == 0 else State.FAILED, f"ended with exit code {code}")
    return code


def tool_command(kind: str, args: list[str]) -> list[str]:
    """The command of a job that is not a run: `python -m brnn_core KIND ARGS`."""
    return [sys.executable, "-m", "brnn_core", kind, *args]


class JobRegistry:
    """Every background job this server started, in one place: runs, lr range tests, predraws, sweeps.

    Every one waits in the queue in its own process (a run behind what trains on its device, a sweep until the
    whole machine is free), so nothing is refused for being busy; `busy` says what a new job would wait behind.
    The processes are kept only to reap them and to show a job that has not written its record yet; disk is the
    truth. Shared by every browser session through `st.cache_resource`, hence the lock.
    """

    def __init__(self):
        self._lock = threading.RLock()
        self._procs: dict[str, subprocess.Popen] = {}  # job id (run id, job folder name, sweep id) -> process

    @staticmethod
    def busy(runs_dir: Path) -> str | None:
        """What a job started now would wait behind (job_queue.busy), None when the machine is free."""
        return job_queue.busy(runs_dir)

    def launch(self, job_id_and_process: Callable[[], tuple[str, subprocess.Popen]]) -> str:
        """Call the spawner and keep its (id, process); returns the id."""
        with self._lock:
            self.reap()
            job_id, proc = job_id_and_process()
            self._procs[job_id] = proc
            return job_id

    # runs
    def start(self, runs_dir: Path, cfg: TrainConfig, *, data_dir: Path | None = None) -> Run:
        """Start a run (queued behind what trains); two quick clicks start exactly one (DuplicateRun)."""
        return self.start_many(runs_dir, [cfg], data_dir=data_dir)[0]

    def start_seeds(self, runs_dir: Path, cfg: TrainConfig, seeds: list[int], *,
                    data_dir: Path | None = None) -> list[Run]:
        """One run per seed, queued in that order."""
        return self.start_many(runs_dir, seed_configs(cfg, seeds), data_dir=data_dir)

    def start_many(self, runs_dir: Path, cfgs: list[TrainConfig], *, data_dir: Path | None = None) -> list[Run]:
        """A run per config (a seed group, a matrix of seed groups), queued in that order; none when one of them
        is invalid or duplicates an active run."""
        with self._lock:
            runs = new_runs(runs_dir, cfgs, data_dir)
            for run in runs:
                self.launch(lambda run=run: (run.id, spawn_worker(run, data_dir=data_dir)))
            return runs

    def branch(self, runs_dir: Path, parent_ref: str, kind: str = "last", overrides: dict | None = None, *,
               data_dir: Path | None = None, keep_tags: bool = False) -> Run:
        """Create a branch of `parent_ref` (branch.create_branch) and start it (queued behind what trains)."""
        def spawn_branch():
            run = create_branch(runs_dir, parent_ref, kind, overrides, data_dir=data_dir, keep_tags=keep_tags)
            return run.id, spawn_worker(run, data_dir=data_dir)

        return Run(Path(runs_dir) / self.launch(spawn_branch))

    def resume(self, run: Run, *, data_dir: Path | None = None, live: dict | None = None) -> None:
        """Continue an ended run from its last.pt, with the `live` changes (queued behind what trains)."""
        with self._lock:
            prepare_resume(run, live)
            self.launch(lambda: (run.id, spawn_worker(run, data_dir=data_dir, resume=True)))

    # jobs that are not runs
    def tool(self, runs_dir: Path, kind: str, device: str, args: Callable[[Run], list[str]], *,
             data_dir: Path | None = None, title: str | None = None, own_session: bool = True,
             **info) -> tuple[Run, subprocess.Popen]:
        """A job folder for `kind` (lr-find, predraw) and its process, `python -m brnn_core KIND ARGS --job FOLDER`,
        which waits its turn on `device`; `args(folder)` gives ARGS (and may put the job's input in its folder).
        Its output goes to the folder's job.log."""
        with self._lock:
            job = job_queue.new_job(runs_dir, kind, device, title=title, **info)
            command = tool_command(kind, [*args(job), "--runs-dir", str(Path(runs_dir).resolve()),
                                          "--job", str(job.path)])
            proc = spawn_entry(job, command, job.path / "job.log", data_dir, own_session=own_session)
            self.launch(lambda: (job.id, proc))
            return job, proc

    def process(self, job_id: str) -> subprocess.Popen | None:
        """The process of a job started here while it runs (a sweep driver before it writes sweep.json)."""
        with self._lock:
            self.reap()
            return self._procs.get(job_id)

    def reap(self) -> None:
        """Collect exit codes of finished jobs so no zombies pile up."""
        for job_id, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[job_id]

