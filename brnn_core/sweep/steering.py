"""The driver's side of a sweep inside Ray Tune: schedulers, a stopper and a callback that talk to runs.

Tune's own way of ending a trial kills its thread inside `tune.report`, with no chance to save last.pt or say
why. So every decision that ends a trial goes through the run's control channel, like a click on Stop: ASHA's
STOP becomes a `stop` command with the scheduler's reason while Tune is told CONTINUE; Stop sweep sends `stop`
to every trial, starts no new one, and tells Tune to end once none is training. Everything here holds only
paths (Tune pickles it with the experiment for `Tuner.restore`).
"""

from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path

from ray.tune import Callback
from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, PopulationBasedTraining, TrialScheduler
from ray.tune.stopper import Stopper

from brnn_core.config import TrainConfig
from brnn_core.fileio import atomic_write_json, read_json
from brnn_core.runs import lifecycle
from brnn_core.runs.rundir import Run, RunError
from brnn_core.states import ACTIVE_STATES, ENDED_STATES, State
from brnn_core.sweep.disk import prune_sweep
from brnn_core.sweep.records import (
    Leaderboard,
    Sweep,
    create_trial_run,
    trial_number,
    trial_run_id,
    write_best_config,
)
from brnn_core.text import plural

RUNNING_FILE = "running.json"  # in the sweep folder: the trials Tune runs now (the callback's, for the stopper)


class SweepControl:
    """The sweep folder seen from Tune's objects: which run a trial is, and whether to stop."""

    def __init__(self, sweep_dir: Path | str):
        self.sweep_dir = str(sweep_dir)

    @property
    def sweep(self) -> Sweep:
        return Sweep(Path(self.sweep_dir))

    def run_of(self, trial_id: str) -> Run:
        sweep = self.sweep
        return Run(sweep.runs_dir / trial_run_id(sweep.id, trial_id))

    def stop_requested(self) -> bool:
        return self.sweep.stop_requested()

    @property
    def running_path(self) -> Path:
        return Path(self.sweep_dir) / RUNNING_FILE

    def set_running(self, trial_ids: set[str]) -> None:
        """The trials Tune started and has not seen end, from the callback, for the stopper (a file, not a
        shared object: `sweep --resume` restores the callback and the stopper as separate copies)."""
        atomic_write_json(self.running_path, sorted(trial_ids))

    def running(self) -> set[str]:
        return set(read_json(self.running_path, []) or [])

    def training(self) -> list[Run]:
        """Trials whose own process is working (not those waiting, as `queued`, for the scheduler)."""
        driver = self.sweep.raw().get("pid")
        return [r for r in self.sweep.trial_runs()
                if (s := r.status()).get("state") in ACTIVE_STATES and s.get("pid") != driver]


class _Steered:
    """Mixin for a Tune scheduler: starts no trial once the sweep is stopping."""

    def __init__(self, *args, control: SweepControl, **kwargs):
        super().__init__(*args, **kwargs)
        self.control = control

    def choose_trial_to_run(self, tune_controller):
        if self.control.stop_requested():
            return None
        return super().choose_trial_to_run(tune_controller)


class Fifo(_Steered, FIFOScheduler):
    """Every trial trains to the end."""


class Pbt(_Steered, PopulationBasedTraining):
    """Population Based Training; the exploit itself is applied by the trial (trial.apply_exploit).

    Never at or after a trial's final epoch: there is nothing left to train, and an exploit would restart
    the trial only to overwrite its last.pt with the donor's and log an lr it never uses."""

    def __init__(self, *args, final_epoch: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.final_epoch = final_epoch

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if result.get(self._time_attr, 0) >= self.final_epoch:
            return TrialScheduler.CONTINUE  # its last epoch: it finishes by itself, test report included
        return super().on_trial_result(tune_controller, trial, result)


class Clamp:
    """PBT's explore step (x0.8 / x1.2, or a resample) kept inside the searched range and TrainConfig's, so the
    value Tune records is the one the trial trains with (TrainConfig would refuse one outside its range)."""

    def __init__(self, bounds: dict[str, tuple[float, float, bool]]):
        self.bounds = bounds  # key -> (low, high, whole number)

    @classmethod
    def for_specs(cls, specs) -> Clamp:
        ranges = {f.name: f.metadata.get("range") for f in fields(TrainConfig)}
        bounds = {}
        for spec in specs:
            if spec.low is None or spec.high is None:
                continue  # listed values: PBT moves between them, never outside
            low, high = spec.low, spec.high
            if ranges.get(spec.key):
                low, high = max(low, ranges[spec.key][0]), min(high, ranges[spec.key][1])
            bounds[spec.key] = (low, high, spec.kind == "randint")
        return cls(bounds)

    def __call__(self, config: dict) -> dict:
        for key, (low, high, whole) in self.bounds.items():
            if key in config:
                value = min(max(config[key], low), high)
                config[key] = int(round(value)) if whole else value
        return config


class Asha(_Steered, AsyncHyperBandScheduler):
    """ASHA whose stops end the trial through its control channel, with the reason written down."""

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        rung = self._rung_before(trial, result)
        action = super().on_trial_result(tune_controller, trial, result)
        if action != TrialScheduler.STOP:
            return action
        if result.get(self._time_attr, 0) >= self._max_t or rung is None:
            return TrialScheduler.CONTINUE  # its last epoch: it finishes by itself, test report included
        milestone, cutoff, n = rung
        value, epoch = result[self._metric], result[self._time_attr]
        worse = "above" if self._metric_op < 0 else "below"
        reason = (f"stopped early by ASHA at epoch {epoch:g}: {self._metric} {value:.4f} is {worse} the cut-off "
                  f"{cutoff:.4f} of the rung at epoch {milestone:g} (only the best 1/{self._reduction_factor:g} of "
                  f"the {n + 1} trials that reached it go on)")
        self.control.run_of(trial.trial_id).send_command("stop", source="asha", reason=reason)
        return TrialScheduler.CONTINUE

    def _rung_before(self, trial, result: dict) -> tuple[float, float, int] | None:
        """(milestone, cut-off in the metric's own units, trials recorded) of the rung this result meets."""
        bracket = self._trial_info.get(trial.trial_id)
        t = result.get(self._time_attr)
        if bracket is None or t is None:
            return None
        for milestone, recorded in bracket._rungs:
            if t >= milestone and trial.trial_id not in recorded:
                cutoff = bracket.cutoff(recorded)
                return None if cutoff is None else (milestone, float(cutoff) * self._metric_op, len(recorded))
        return None


class SweepStopper(Stopper):
    """Ends the experiment once a stop was asked for and no trial is still training."""

    def __init__(self, control: SweepControl):
        self.control = control

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        """Once every trial that was running has ended by itself: a trial stopped with the sweep then ends as
        unfinished to Tune (space.TrialStopped), so `sweep --resume` trains it on; ending the experiment
        earlier would record it as terminated."""
        if not self.control.stop_requested() or self.control.training():
            return False
        return not self.control.running()


class SweepCallback(Callback):
    """Keeps sweep.json current, forwards Stop sweep to the trials, marks dead trials, prunes, prints."""

    def __init__(self, control: SweepControl, keep_best: int | None = 3, printer=print,
                 time_budget_s: float | None = None):
        self.control = control
        self.time_budget_s = time_budget_s
        self.deadline: float | None = None  # set when Tune starts the experiment (setup)
        self.keep_best = keep_best  # trials keeping last.pt besides the unfinished ones; None keeps every one
        self.printer = printer
        self.stop_reason: dict | None = None  # the stop every trial is sent (set once the sweep stops)
        self.told: set[str] = set()  # runs sent it
        self.board: Leaderboard | None = None  # made at the first result (the metric is in sweep.json)
        self.running: set[str] = set()  # trial ids Tune started and has not seen end (control.set_running)

    def setup(self, **info):
        """Tune calls this when the experiment starts, and again when `sweep --resume` restores it (this object
        unpickled with the first start's budget, which counted from that start): a resumed sweep has the budget
        given with --resume, if any, else runs to its end."""
        raw = self.control.sweep.raw()  # `resumed` and `resume_budget_s`: runner.resume_checked, before Tune restores
        if raw.get("resumed"):
            self.time_budget_s = raw.get("resume_budget_s")
        self.deadline = None if self.time_budget_s is None else time.time() + self.time_budget_s
        self.stop_reason, self.told = None, set()
        self.running.clear()
        self.control.set_running(self.running)

    def on_step_begin(self, iteration, trials, **info):
        if self.stop_reason is not None:
            # at every step until Tune ends: a trial whose worker was still starting when the stop went out
            # (Tune had launched it) says it trains only later, and must get the same stop
            self.tell_to_stop()
            self.wait_for_restored(trials)
            return
        budget = self.deadline is not None and time.time() >= self.deadline
        if budget and not self.control.stop_requested():
            self.control.sweep.request_stop("budget")
        if not self.control.stop_requested():
            return
        self.stop_reason = {"source": "budget", "reason": f"the sweep's time budget of {self.time_budget_s / 60:g} "
                                                          "min ran out (last.pt kept: `sweep --resume` continues it)"} \
            if budget else {}
        busy = self.tell_to_stop()
        self.wait_for_restored(trials)
        self.control.sweep.log_event("stop", f"{'time budget' if budget else 'stop'}: "
                                             f"{plural(len(busy), 'training trial')} told to stop")
        self.printer(f"{'time budget reached, ' if budget else ''}stopping {plural(len(busy), 'trial')}: each "
                     "saves last.pt and ends; no new trial starts")

    def wait_for_restored(self, trials) -> None:
        """A trial that has trained before (a resumed sweep's) and that Tune has not launched yet is waited for too:
        were the experiment ended now, Tune would record it as terminated and no later `sweep --resume` would train
        it on; launched, it sees the stop and ends unfinished (space.TrialStopped)."""
        pending = {t.trial_id for t in trials if t.status == "PENDING" and t.trial_id not in self.running
                   and self.control.run_of(t.trial_id).exists()}
        if pending:
            self.running |= pending
            self.control.set_running(self.running)

    def tell_to_stop(self) -> list[Run]:
        """Send the sweep's stop to every training trial not sent it yet; returns those sent it now."""
        busy = [run for run in self.control.training() if run.id not in self.told]
        for run in busy:
            run.send_command("stop", **self.stop_reason)
            self.told.add(run.id)
        return busy

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        self.control.set_running(self.running)
        if self.control.stop_requested():
            return  # Tune may still hand a pending trial to an idle worker: the trial sees the stop and returns
        sweep = self.control.sweep
        run_id = trial_run_id(sweep.id, trial.trial_id)
        known = sweep.raw().get("trials") or []
        if run_id not in known:
            sweep.write(trials=sorted([*known, run_id], key=lambda r: (len(r), r)))  # t9 before t10
            values = ", ".join(f"{k}={_fmt(v)}" for k, v in trial.config.items())
            self.printer(f"{trial_number(run_id)} started: {values}")

    def leaderboard(self, sweep: Sweep) -> Leaderboard:
        if self.board is None:
            self.board = Leaderboard(sweep.raw().get("metric", "val_loss"))
        return self.board

    def on_trial_result(self, iteration, trials, trial, result, **info):
        """Constant work per result, whatever the number of trials: no trial's files are read to rank them."""
        sweep = self.control.sweep
        board = self.leaderboard(sweep)
        if board.metric in result and result.get("run_id"):
            epochs = (self.control.run_of(trial.trial_id).stored_status().get("live") or {}).get("epochs", "?")
            self.printer(f"{trial_number(result['run_id'])} epoch {result.get('epoch')}/{epochs}: "
                         f"val_loss {result['val_loss']:.4f}, val_accuracy {100 * result['val_accuracy']:.2f}%")
            if board.add(result["run_id"], result[board.metric], result.get("epoch", 0)):
                sweep.write(best=board.best())
                write_best_config(sweep, board.best())

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._ended(trial, None)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._ended(trial, trial.error_file or "the trial's process died")

    def _ended(self, trial, error: str | None) -> None:
        self.running.discard(trial.trial_id)
        self.control.set_running(self.running)
        run = self.control.run_of(trial.trial_id)
        # failed where this machine cannot see it (not one left unstarted as its sweep stopped): record it here
        if error and not run.exists() and not never_started(error):
            try:
                record_lost_trial(self.control.sweep, trial, error)
            except (RunError, ValueError, OSError) as exc:  # Tune's loop must go on; say it at least
                self.printer(f"{trial_number(run.id)} failed ({error_line(error)}); not recorded: {exc}")
        if run.exists():
            status = run.status()
            if error and status.get("state") in ACTIVE_STATES + (State.INTERRUPTED,):
                run.log_event("error", f"the trial's process ended without finishing (Ray: {error})",
                              step=status.get("step"))
                lifecycle.process_died(run, "the trial's process died; `sweep --resume` or Resume continues it "
                                            "from last.pt", status.get("step"))
            status = run.status()
            state, message = status.get("state"), status.get("message") or ""
            if state in ENDED_STATES:
                said = message if message.startswith(state) else f"{state}: {message}"
                self.printer(f"{trial_number(run.id)} {said}")
        sweep = self.control.sweep
        if self.keep_best is not None:
            prune_sweep(sweep, self.keep_best, ranking=self.board.ranking() if self.board else None)


def never_started(error: str) -> bool:
    """True for a trial that did not start because its sweep was stopping (space.TrialStopped in Tune's error
    file): unfinished to Tune, so `sweep --resume` starts it; nothing to record."""
    try:
        return "TrialStopped" in Path(error).read_text(errors="replace")
    except OSError:
        return False


def error_line(error: str) -> str:
    """The exception's own line from Tune's error file (`...SweepError: node x does not see ...`), else `error`."""
    try:
        lines = [line.strip() for line in Path(error).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return error
    said = [line for line in lines if not line.startswith(("File ", "^", "~", "Traceback", "ray::", "Failure #"))]
    last = said[-1] if said else error
    name, _, message = last.partition(": ")
    return message if message and name.replace(".", "").replace("_", "").isalnum() else last


def record_lost_trial(sweep: Sweep, trial, error: str) -> None:
    """A trial that failed before it made its run directory here (e.g. on a node that joined the cluster after
    the check and does not see the runs folder: cluster.require_shared) still gets one, `failed` with why."""
    info = sweep.raw()
    searched = {k: trial.config[k] for k in (info.get("search") or {}) if k in trial.config}
    message = error_line(error)
    run = create_trial_run(sweep.runs_dir, Path(info.get("data_dir") or "."), sweep.id, trial.trial_id,
                           {**(info.get("base") or {}), **searched}, searched, info.get("scheduler", "fifo"),
                           info.get("metric", "val_loss"))
    run.log_event("error", f"the trial failed before it started: {message}")
    lifecycle.failed_before_start(run, message)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
