"""The Ray Tune objects of a sweep: the trainable with its resources, the search space, the scheduler.

Imported only by the driver once Ray's environment is set up (runner.prepare_env), since importing
ray reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
from ray import tune

from brnn_core.sweep.plan import SweepPlan
from brnn_core.sweep.records import Sweep
from brnn_core.sweep.space import to_mutation, to_tune
from brnn_core.sweep.steering import Asha, Clamp, Fifo, Pbt, SweepCallback, SweepControl, SweepStopper
from brnn_core.sweep.trial import TrialSetup, train_trial

# Reusing a trial's Ray worker for the next trial (or a PBT restart) saves a process start and torch import
# each time; every run sets its own seed, threads and device, so nothing carries over but the process.
TUNE_CHECKPOINTS_KEPT = 3  # PBT copies the latest; older ones may still be in flight to an exploited trial


def trainable(plan: SweepPlan, sweep: Sweep, data_dir: Path):
    setup = TrialSetup(sweep_id=plan.sweep_id, sweep_dir=str(sweep.path), runs_dir=str(sweep.runs_dir),
                       data_dir=str(Path(data_dir).resolve()), base=plan.base,
                       searched=tuple(s.key for s in plan.specs), metric=plan.metric, scheduler=plan.scheduler,
                       checkpoint_every=1 if plan.scheduler == "pbt" else 0, driver_pid=os.getpid(),
                       driver_started=psutil.Process().create_time())
    fn = tune.with_parameters(train_trial, setup=setup)
    return tune.with_resources(fn, {"cpu": plan.cpus_per_trial, "gpu": plan.gpus_per_trial})


def make_scheduler(plan: SweepPlan, control: SweepControl):
    if plan.scheduler == "asha":
        return Asha(control=control, time_attr="epoch", metric=plan.metric, mode=plan.mode,
                    max_t=int(plan.base["epochs"]), grace_period=plan.grace_period,
                    reduction_factor=plan.reduction_factor)
    if plan.scheduler == "pbt":
        return Pbt(control=control, time_attr="epoch", metric=plan.metric, mode=plan.mode,
                   perturbation_interval=plan.perturbation_interval, final_epoch=int(plan.base["epochs"]),
                   hyperparam_mutations={s.key: to_mutation(s) for s in plan.specs},
                   custom_explore_fn=Clamp.for_specs(plan.specs))
    return Fifo(control=control)


def search_alg(plan: SweepPlan):
    """None: Tune's random/grid sampling. tpe: Optuna's TPE, asked for at most `concurrency` trials at once (it
    learns from finished results, so it should not hand out every trial before the first one reports)."""
    if plan.search_alg != "tpe":
        return None
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch  # imports optuna: only for a TPE sweep

    return ConcurrencyLimiter(OptunaSearch(metric=plan.metric, mode=plan.mode, seed=int(plan.base.get("seed", 0))),
                              max_concurrent=plan.concurrency)


def max_concurrent(plan: SweepPlan) -> int | None:
    """Tune's limit on trials at once. Not for PBT: the whole population must exist so that PBT can pause
    some and run others in turn (the embedded Ray then holds exactly `concurrency` trials, runner.py)."""
    return None if plan.scheduler == "pbt" else plan.concurrency


def build_tuner(plan: SweepPlan, sweep: Sweep, data_dir: Path, *, restore: bool = False) -> tune.Tuner:
    """A new Tuner for the plan, or the sweep's experiment restored (`--resume`)."""
    fn = trainable(plan, sweep, data_dir)
    if restore:
        return tune.Tuner.restore(str(sweep.tune_dir), fn, resume_unfinished=True, resume_errored=True)
    control = SweepControl(sweep.path)
    callback = SweepCallback(control, plan.keep_best, time_budget_s=plan.time_budget_s)
    return tune.Tuner(
        fn, param_space={s.key: to_tune(s) for s in plan.specs},
        tune_config=tune.TuneConfig(num_samples=plan.samples, max_concurrent_trials=max_concurrent(plan),
                                    scheduler=make_scheduler(plan, control), search_alg=search_alg(plan),
                                    reuse_actors=True),
        run_config=tune.RunConfig(name=sweep.tune_dir.name, storage_path=str(sweep.path), verbose=0,
                                  stop=SweepStopper(control), callbacks=[callback],
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=TUNE_CHECKPOINTS_KEPT),
                                  failure_config=tune.FailureConfig(max_failures=0)))
