"""The sweep driver: start (or join) Ray, run Ray Tune over trials that are ordinary runs, record the end.

Embedded by default: `ray.init` starts a private Ray on 127.0.0.1 for this sweep (dashboard off, token
authentication on) and `ray.shutdown()` ends it; with an address it joins a running cluster. The Ray behaviours
this file works around (the address Ray listens on, when the token is sent, the length of its socket paths)
are in docs/sweeps.md, "What Ray does that the driver relies on"; each is handled where it is set up below.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil

from brnn_core.runs import lifecycle
from brnn_core.runs.index import update_store
from brnn_core.states import ACTIVE_STATES, State
from brnn_core.sweep.cluster import check_cluster
from brnn_core.sweep.disk import prune_sweep, prune_tune_checkpoints
from brnn_core.sweep.plan import SweepPlan, SweepRequest, cluster_address, describe, fit_cluster, local_gpus
from brnn_core.sweep.records import (
    FORMAT_VERSION,
    RESUMABLE,
    Sweep,
    best_trial,
    counts,
    resolve_sweep,
    sweeps_dir,
    trial_number,
    write_best_config,
)
from brnn_core.sweep.space import SweepError, TrialStopped
from brnn_core.text import plural

REPO = Path(__file__).resolve().parents[2]
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0",  # no usage reports (no traffic off this machine)
           "TUNE_DISABLE_SIGINT_HANDLER": "1",  # Ctrl-C is ours: stop trials cleanly (see drive)
           "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",  # the run directories are the record, not Tune's CSV/TB files
           "RAY_AIR_NEW_OUTPUT": "0"}  # with verbose=0: Tune prints nothing; our callback prints
EMBEDDED_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                # read by the raylet ray.init starts: the workers it would start ahead for the first driver sat
                # idle beside the ones Tune starts for its trials, each importing Ray for nothing
                "RAY_prestart_worker_first_driver": "0"}
EXIT = {State.FINISHED: 0, State.STOPPED: 0, State.FAILED: 1, State.INTERRUPTED: 1}


def token_available() -> bool:
    """A Ray auth token this account can send: $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return Path(path).is_file()


def prepare_env(address: str | None) -> None:
    """Environment for Ray, set before ray is imported (it reads some of it at import)."""
    os.environ.update(RAY_ENV)
    if address is None:  # the embedded Ray only: the first setting would make a client refuse a real head
        os.environ.update(EMBEDDED_ENV)
    if "RAY_AUTH_MODE" not in os.environ and (address is None or token_available()):
        # embedded: Ray's default made explicit (it creates ~/.ray/auth_token if missing); a cluster started
        # with `ray start` asks for the token: send it with no extra step. RAY_AUTH_MODE=disabled is respected.
        os.environ["RAY_AUTH_MODE"] = "token"
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)  # Tune's result files
    for name in ("ray.tune.execution.tune_controller", "ray.tune.tune"):
        tune_logger = logging.getLogger(name)
        if not any(isinstance(f, SaidAlready) for f in tune_logger.filters):
            tune_logger.addFilter(SaidAlready())


class SaidAlready(logging.Filter):
    """Drops what Tune logs about trials our callback has already reported in one line and recorded in their
    runs: the traceback of a trial that failed with a SweepError (a node without the shared folders,
    cluster.require_shared) or ended with TrialStopped (a Stop, the time budget, Ctrl-C: not an error to the user),
    and Tune's closing "Trials did not complete" (the driver's `trials:` line counts them). Ray's RayTaskError for
    a trial is also an instance of the cause's class. Also Tune's traceback for deleting an old checkpoint of its
    own that is already gone: PBT asks its best trials to save the checkpoint they have just reported, Tune files
    it twice, and deletes it twice when it is old. Every other failure keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (SweepError, TrialStopped)):
            return False
        if isinstance(error, FileNotFoundError) and "Error handling checkpoint" in str(record.msg):
            return False
        return not str(record.msg).startswith("Trials did not complete")


def ray_dir_for(sweep_dir: Path) -> Path:
    """A temp folder short enough for Ray's socket paths (linked from the sweep folder as `ray`)."""
    digest = hashlib.sha1(str(sweep_dir.resolve()).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"brnn-ray-{os.getuid() if hasattr(os, 'getuid') else 0}" / digest


def worker_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "BRNN_PROGRESS": "plain"}


@contextlib.contextmanager
def ray_session(plan: SweepPlan, ray_dir: Path):
    """Ray for the length of the sweep: an embedded one, or a connection to `plan.address`."""
    import ray  # lazy: ray reads its environment (prepare_env) when imported, and takes seconds to load

    kwargs = dict(runtime_env={"env_vars": worker_env()}, log_to_driver=False, logging_level=logging.WARNING)
    try:
        if plan.address:
            ray.init(address=plan.address, **kwargs)
        else:
            cpus = math.ceil(plan.concurrency * plan.cpus_per_trial)  # PBT: this is what bounds concurrency
            if plan.scheduler != "pbt":
                cpus = max(os.cpu_count() or 1, cpus)
            ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, _temp_dir=str(ray_dir), num_cpus=cpus,
                     num_gpus=local_gpus(), **kwargs)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, AuthenticationError, RuntimeError...
        with contextlib.suppress(Exception):
            ray.shutdown()
        where = plan.address or "this machine"
        hint = (" The cluster wants its token: copy ~/.ray/auth_token from the head machine here, or set "
                "RAY_AUTH_TOKEN." if "auth" in str(exc).lower() or "token" in str(exc).lower() else "")
        raise SweepError(f"Ray did not start or connect on {where}: {type(exc).__name__}: {exc}.{hint}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def run_sweep(plan: SweepPlan, request: SweepRequest, runs_dir: Path, data_dir: Path, printer=print) -> int:
    """Run a checked plan to its end; returns the exit code (0 finished or stopped, 1 failed/interrupted)."""
    prepare_env(plan.address)
    sweep_dir = sweeps_dir(runs_dir).resolve() / plan.sweep_id
    ray_dir = ray_dir_for(sweep_dir)
    with ray_session(plan, ray_dir) as ray:
        nodes = None
        if plan.address:
            fit_cluster(plan, request, ray.cluster_resources())
            nodes = check_cluster(ray, runs_dir, data_dir)  # before any trial: every node sees the folders
            printer(f"cluster check: {plural(len(nodes), 'node')} with CPUs see {runs_dir} and {data_dir} and run "
                    "the same brnn_core")
        printer(describe(plan))
        sweep = create_sweep(plan, sweep_dir, ray_dir, data_dir)
        if nodes is not None:
            sweep.write(nodes=nodes)
        printer(f"sweep folder: {sweep.path}  (Ray's logs: {ray_dir})")
        from brnn_core.sweep.tuning import build_tuner  # lazy: imports ray, only once prepare_env has run

        return drive(sweep, build_tuner(plan, sweep, data_dir), plan, printer)


def create_sweep(plan: SweepPlan, sweep_dir: Path, ray_dir: Path, data_dir: Path) -> Sweep:
    """sweep.json, written once Ray runs (a bad address or spec leaves nothing behind)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)  # exists already when the dashboard started us (driver.log)
    sweep = Sweep(sweep_dir)
    link = sweep_dir / "ray"
    if not link.exists():
        with contextlib.suppress(OSError):
            link.symlink_to(ray_dir, target_is_directory=True)
    now = time.time()
    sweep.write(format_version=FORMAT_VERSION, id=plan.sweep_id, name=plan.name, created=now, started=now,
                ended=None, state=State.RUNNING, message="starting", pid=os.getpid(),
                pid_started=psutil.Process().create_time(), plan=plan.to_dict(),
                search={s.key: s.to_dict() for s in plan.specs}, scheduler=plan.scheduler, metric=plan.metric,
                mode=plan.mode, base=plan.base, address=plan.address or "local", ray_dir=str(ray_dir),
                tune_dir=str(sweep.tune_dir), data_dir=str(Path(data_dir).resolve()), trials=[], best=None,
                resources={"concurrency": plan.concurrency, "cpus_per_trial": plan.cpus_per_trial,
                           "gpus_per_trial": plan.gpus_per_trial}, command=sys.argv)
    sweep.log_event("start", describe(plan))
    return sweep


def drive(sweep: Sweep, tuner, plan: SweepPlan, printer) -> int:
    """Tuner.fit with our Ctrl-C: the first one (or SIGTERM) stops every trial cleanly, a second aborts."""
    def on_signal(signum, frame):
        if sweep.stop_requested():
            raise KeyboardInterrupt
        sweep.request_stop("keyboard" if signum == signal.SIGINT else "signal")
        printer("\nstopping the sweep: every trial saves last.pt, then ends (Ctrl-C again to abort)")

    handlers = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # only the main thread may set handlers
            handlers[sig] = signal.signal(sig, on_signal)
    sweep.write(message="running")
    try:
        tuner.fit()
        source = sweep.stop_source()
        message = "stopped: the time budget ran out" if source == "budget" else "stopped on request"
        state, message = (State.STOPPED, f"{message}; `sweep --resume {sweep.id}` continues it") if source \
            else (State.FINISHED, "finished")
    except KeyboardInterrupt:
        state, message = State.INTERRUPTED, f"aborted: `python -m brnn_core sweep --resume {sweep.id}` continues it"
    except Exception as exc:  # noqa: BLE001 - the record must say how the sweep ended
        lost = head_lost(plan, exc)
        state = State.INTERRUPTED if lost else State.FAILED
        message = f"{type(exc).__name__}: {exc}" + (f"; `sweep --resume {sweep.id}` continues it" if lost else "")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return finish(sweep, plan, state, message, printer)


def head_lost(plan: SweepPlan, exc: Exception) -> bool:
    """True when Tune failed because Ray went away (the sweep can be resumed), not because of the sweep itself:
    Ray's error says so, or, on a cluster, its head no longer answers at its address."""
    text = str(exc).lower()
    if "connection" in text or "gcs" in text:
        return True
    if plan.address is None:
        return False
    try:
        cluster_address(plan.address)
    except SweepError:
        return True
    return False


def finish(sweep: Sweep, plan: SweepPlan, state: str, message: str, printer) -> int:
    """Record the end: trials left waiting become `stopped`, checkpoints pruned, the best written down."""
    release_waiting(sweep)
    if plan.keep_best is not None:
        prune_sweep(sweep, plan.keep_best)
        if state in (State.FINISHED, State.STOPPED):
            prune_tune_checkpoints(sweep)
    best = best_trial(sweep)  # once, at the end: every trial read, whatever the driver saw
    write_best_config(sweep, best)
    update_store(sweep.runs_dir)  # the dashboard's next start reads none of these trials again
    tally = ", ".join(f"{n} {s}" for s, n in sorted(counts(sweep).items()))
    if best:
        message += (f"; best {trial_number(best['run_id'])} ({best['run_id']}): {best['metric']} "
                    f"{best['value']:.4f} at epoch {best['epoch']:g}")
    sweep.write(state=state, message=f"{message} [{tally}]" if tally else message, ended=time.time(), best=best)
    sweep.log_event("end", message, state=state)
    printer(f"{state}: {message}" + (f"\ntrials: {tally}" if tally else ""))
    return EXIT[state]


def release_waiting(sweep: Sweep) -> None:
    """Trials the scheduler had paused (queued under the driver's pid) end `stopped`, last.pt as it was."""
    driver = sweep.raw().get("pid")
    for run in sweep.trial_runs():
        status = run.stored_status()
        if status.get("state") in ACTIVE_STATES and status.get("pid") == driver:
            run.log_event("stopped", "the sweep ended while this trial waited for its scheduler; last.pt is kept: "
                                     "`train --resume` continues it", step=status.get("step"))
            lifecycle.stopped_while_waiting(run)


def check_resume(sweep_id: str, runs_dir: Path, time_budget_min: float | None = None) -> Sweep:
    """`sweep --resume`: the sweep it names, once it is sure it can be continued (SweepError saying why not),
    before it waits for its turn; `resume_checked` then continues it."""
    if time_budget_min is not None and time_budget_min <= 0:
        raise SweepError(f"--time-budget {time_budget_min:g}: minutes above 0")
    sweep = resolve_sweep(runs_dir, sweep_id)
    info = sweep.info()
    state = info.get("state")
    if state == State.RUNNING:
        raise SweepError(f"sweep {sweep_id} is still running (driver pid {info.get('pid')}); stop it first")
    if state not in RESUMABLE and not interrupted_trials(sweep):
        raise SweepError(f"sweep {sweep_id} {state}: nothing to resume. Its trials are ordinary runs: continue one "
                         "with `python -m brnn_core train --resume RUN`")
    if not (sweep.tune_dir / "tuner.pkl").is_file():
        raise SweepError(f"{sweep.tune_dir} holds no Tune experiment to restore")
    return sweep


def interrupted_trials(sweep: Sweep) -> list:
    return [r for r in sweep.trial_runs() if r.status().get("state") == State.INTERRUPTED]


def resume_checked(sweep: Sweep, printer=print, time_budget_min: float | None = None) -> int:
    """Continue a sweep `check_resume` accepted where Tune's experiment state left it, with a time budget of its
    own when given (the first start's budget is spent: it counted from that start)."""
    info = sweep.info()
    interrupted = interrupted_trials(sweep)
    plan = SweepPlan.from_dict(info["plan"])
    plan.time_budget_s = None if time_budget_min is None else 60.0 * time_budget_min  # the continued part's own
    prepare_env(plan.address)
    ray_dir = ray_dir_for(sweep.path)
    with ray_session(plan, ray_dir) as ray:
        if plan.address:
            check_cluster(ray, sweep.runs_dir, Path(info["data_dir"]))
        sweep.clear_requests()
        sweep.write(state=State.RUNNING, message="resuming", pid=os.getpid(),
                    pid_started=psutil.Process().create_time(), ended=None,
                    resumed=[*(info.get("resumed") or []), time.time()],
                    resume_budget_s=None if time_budget_min is None else 60.0 * time_budget_min)
        budget = "" if time_budget_min is None else f", time budget {time_budget_min:g} min"
        sweep.log_event("resume", f"resumed ({plural(len(interrupted), 'interrupted trial')}{budget})")
        printer(f"resuming {describe(plan)}")
        from brnn_core.sweep.tuning import build_tuner  # lazy: imports ray, only once prepare_env has run

        return drive(sweep, build_tuner(plan, sweep, Path(info["data_dir"]), restore=True), plan, printer)
