"""One sweep trial: a Ray Tune function trainable that is an ordinary run.

The trial makes (or finds) its run directory and trains it with the worker's own `train_run_dir`, so the Train
page shows it live and Pause/Resume/Stop work on it; after each epoch's files are written it reports to Tune.
Every status write is the session's: this module writes none. An ASHA stop arrives as a `stop` command; a PBT
pause ends the thread inside `tune.report`, the run is `queued` until Tune starts it again from its own or the
donor's checkpoint (the new lr/clip set through the session's live-change path, a `set` event from `pbt`); a
restored sweep continues each trial from its last.pt.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import ray
import torch
from ray import tune

from brnn_core.config import LIVE_FIELDS
from brnn_core.runs.rundir import Run
from brnn_core.states import State
from brnn_core.sweep.cluster import require_shared
from brnn_core.sweep.records import SCHEDULER_STOPS, Sweep, create_trial_run, trial_run_id
from brnn_core.sweep.space import TrialStopped
from brnn_core.training.session import TrainingSession
from brnn_core.training.worker import train_run_dir

TUNE_MODEL = "model.pt"  # inside a Tune checkpoint: a copy of the trial's last.pt at that epoch
TUNE_META = "trial.json"  # which run and step it came from
DONOR_FILE = ".pbt-donor.pt"  # where an exploited trial puts the donor's weights until restored
FINAL_STATES = (State.FINISHED, State.FAILED, State.DIVERGED)
# Tune parks a paused trial's thread inside `tune.report`, in an actor it keeps for reuse, and ends that thread
# only when it reuses or drops the actor; the thread holds the run's worker lock until then. When the trial starts
# again on another actor first, it waits for that thread: the old one's last write ('queued') then comes before
# the new one's first. Tune ends such a thread within moments (its paused trials are what reuse the actors), so
# a run still busy after this long is trained by someone else.
PARKED_THREAD_WAIT_S = 120.0


@dataclass(frozen=True)
class TrialSetup:
    """What every trial of a sweep shares (given to Tune with `tune.with_parameters`)."""

    sweep_id: str
    sweep_dir: str
    runs_dir: str
    data_dir: str
    base: dict  # TrainConfig fields before the searched ones are filled in
    searched: tuple[str, ...]
    metric: str
    scheduler: str
    checkpoint_every: int = 0  # epochs between Tune checkpoints (PBT needs them to copy weights); 0: never
    driver_pid: int = 0
    driver_started: float = 0.0


def train_trial(config: dict, setup: TrialSetup) -> None:
    """The Tune trainable: train this trial's run, reporting each epoch."""
    require_shared(Path(setup.sweep_dir))  # a node without the shared runs folder writes nothing anywhere
    trial_id = tune.get_context().get_trial_id()
    run = Run(Path(setup.runs_dir) / trial_run_id(setup.sweep_id, trial_id))
    if not run.exists() and Sweep(Path(setup.sweep_dir)).stop_requested():
        # the sweep is stopping: never start a new trial, but leave it unfinished to Tune (`sweep --resume` starts it)
        raise TrialStopped(f"trial {trial_id} not started: its sweep is stopping; `sweep --resume` starts it")
    searched = {k: config[k] for k in setup.searched}
    base = {**setup.base, "device": trial_device(str(setup.base.get("device", "auto")), ray.get_gpu_ids())}
    status = run.stored_status() if run.exists() else {}
    if status.get("state") in FINAL_STATES or status.get("stopped_by") in SCHEDULER_STOPS:
        report_final(run, setup)  # Tune lost track of an ended trial (restored sweep): nothing to train
        return
    if run.exists() and Sweep(Path(setup.sweep_dir)).stop_requested():
        # Tune launched it before the stop and its worker started only now: it stays as it is, unfinished to
        # Tune. (A stop after this check reaches its session as a command: SweepCallback.tell_to_stop.)
        raise TrialStopped(f"{run.id} not continued: its sweep is stopping; `sweep --resume` continues it")
    plan = plan_start(run, setup, base, searched, trial_id, tune.get_checkpoint())
    try:
        state = train_run_dir(run, data_dir=Path(setup.data_dir), resume=plan.resume, resume_from=plan.source,
                             before_start=plan.before_start, after_epoch=Reporter(run, setup),
                             handoff=(setup.driver_pid, setup.driver_started),  # Tune may end the thread
                             status_fields={"ray_node": ray.get_runtime_context().get_node_id()},
                             lock_wait_s=PARKED_THREAD_WAIT_S)
    finally:
        if plan.source is not None:
            plan.source.unlink(missing_ok=True)
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()  # Ray reuses this process for the next trial: give the cached memory back
    if state == State.STOPPED and run.stored_status().get("stopped_by") not in SCHEDULER_STOPS:
        # stopped with the sweep (Stop sweep, Ctrl-C, the time budget): unfinished to Tune, so that
        # `sweep --resume` trains it on from its last.pt (Tune restores only trials it did not see end)
        raise TrialStopped(f"{run.id} stopped with the sweep at step {run.stored_status().get('step')}; "
                           "`sweep --resume` continues it")


@dataclass
class StartPlan:
    resume: bool = False
    source: Path | None = None  # a donor checkpoint (PBT exploit), else the run's own last.pt
    before_start: object = None


def trial_device(device: str, gpu_ids: list) -> str:
    """The device a trial trains on, as this trial's process sees it.

    Ray shows a trial only the GPUs it was given, numbered from 0: `cuda:1` there is `cuda` (its first).
    A trial given no GPU trains on the CPU, `auto` too: a GPU it was not given is another trial's."""
    device = device.strip().lower()
    if not gpu_ids and device == "auto":
        return "cpu"
    if gpu_ids and device.startswith("cuda"):
        return "cuda"
    return device


def plan_start(run: Run, setup: TrialSetup, base: dict, searched: dict, trial_id: str, checkpoint) -> StartPlan:
    """New trial: create its run (`base`: the sweep's settings on this trial's device). Known trial: continue
    from its last.pt, or from the donor's (PBT)."""
    if not run.exists():
        create_trial_run(Path(setup.runs_dir), Path(setup.data_dir), setup.sweep_id, trial_id,
                         {**base, **searched}, searched, setup.scheduler, setup.metric)
        if checkpoint is None:
            return StartPlan()
    if checkpoint is None:
        return StartPlan(resume=True)
    with checkpoint.as_directory() as folder:
        meta = json.loads((Path(folder) / TUNE_META).read_text())
        if meta["run_id"] == run.id:
            return StartPlan(resume=True)  # its own checkpoint (paused, then started again): last.pt is as new
        donor_file = run.checkpoint_dir / DONOR_FILE
        shutil.copyfile(Path(folder) / TUNE_MODEL, donor_file)
    own = run.stored_status().get("live") or {}
    return StartPlan(resume=True, source=donor_file,
                     before_start=lambda c: apply_exploit(c, setup, searched, meta, own))


def apply_exploit(session: TrainingSession, setup: TrialSetup, new: dict, donor: dict, own: dict) -> None:
    """After restoring the donor's weights and optimizer: set the perturbed values, logged like a live change.

    The event's `old` is this trial's own value before the exploit (the donor's is `donor_value`)."""
    session.run.log_event("pbt", f"exploit: continues from run {donor['run_id']}'s checkpoint at step "
                                 f"{donor['step']} (epoch {donor['epoch']}) with perturbed "
                                 f"{', '.join(f'{k}={v:g}' for k, v in new.items())}",
                          step=session.step, donor=donor["run_id"], donor_step=donor["step"])
    for name in [k for k in setup.searched if k in LIVE_FIELDS]:
        donor_value = getattr(session.live, name)
        session.change(name, new[name], source="pbt", was=own.get(name, donor_value), donor=donor["run_id"],
                       donor_step=donor["step"], donor_value=donor_value)


class Reporter:
    """`after_epoch`: report the epoch's metrics to Tune, with a checkpoint every `checkpoint_every` epochs."""

    def __init__(self, run: Run, setup: TrialSetup):
        self.run, self.setup = run, setup

    def __call__(self, epoch: int, metrics: dict) -> None:
        step = int(self.run.stored_status().get("step") or 0)
        result = {"epoch": epoch, "step": step, "val_loss": metrics["val_loss"], "val_accuracy": metrics["val_acc"],
                  "train_loss": metrics["train_loss"], "run_id": self.run.id}
        every = self.setup.checkpoint_every
        if not every or epoch % every:
            tune.report(result)
            return
        folder = Path(tempfile.mkdtemp(prefix="brnn-tune-ckpt-"))
        try:
            shutil.copyfile(self.run.last_ckpt, folder / TUNE_MODEL)  # last.pt was just saved for this epoch
            (folder / TUNE_META).write_text(json.dumps({"run_id": self.run.id, "step": step, "epoch": epoch}))
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(folder)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def report_final(run: Run, setup: TrialSetup) -> None:
    """Tell Tune the last metric of a trial that already ended, so its scheduler and the best are right."""
    val = run.metrics()
    val = val[val["split"] == "val"]
    if len(val):
        row = val.iloc[-1]
        tune.report({"epoch": int(row["epoch"]), "step": int(row["step"]), "val_loss": float(row["loss"]),
                     "val_accuracy": float(row["accuracy"]), "run_id": run.id})
