"""`python -m brnn_core sweep ...`: the options (docs/sweeps.md) and their handler."""

from __future__ import annotations

import argparse
from pathlib import Path

from brnn_core.data.datasets import default_data_dir
from brnn_core.data.loading import ensure_dataset
from brnn_core.data.predraw import predraw
from brnn_core.runs.job_queue import EVERY_SLOT, new_job
from brnn_core.runs.jobs import in_turn
from brnn_core.runs.rundir import default_runs_dir
from brnn_core.sweep.plan import DEFAULT_KEEP_BEST, SCHEDULERS, SEARCH_ALGS, SweepRequest, plan_sweep
from brnn_core.sweep.records import METRICS
from brnn_core.sweep.runner import check_resume, resume_checked, run_sweep
from brnn_core.sweep.space import SweepError


def add_parser(sub) -> argparse.ArgumentParser:
    sw = sub.add_parser("sweep", help="search hyperparameters with Ray Tune (every trial is a run)")
    sw.add_argument("--config", help="JSON file of TrainConfig fields: the base of every trial")
    sw.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="fix one base field (repeatable)")
    sw.add_argument("--search", action="append", default=[], metavar="KEY=SPEC",
                    help="search a field: choice:a,b,c grid:a,b,c uniform:lo:hi loguniform:lo:hi randint:lo:hi")
    sw.add_argument("--trials", type=int, default=None, help="samples (grids multiply it; default 8, 1 for grids only)")
    sw.add_argument("--scheduler", default="fifo", choices=SCHEDULERS)
    sw.add_argument("--metric", default="val_loss", choices=list(METRICS))
    sw.add_argument("--search-alg", default="random", choices=SEARCH_ALGS,
                    help="random: independent samples (grids: every value); tpe: Optuna's TPE picks each next trial "
                         "from the results so far (fifo or asha, no grid specs)")
    sw.add_argument("--grace-period", type=int, default=1, metavar="EPOCHS",
                    help="asha: epochs every trial trains before it may be stopped (default 1)")
    sw.add_argument("--reduction-factor", type=int, default=2, metavar="N",
                    help="asha: only the best 1/N of the trials at each rung go on (default 2; Ray's own is 4)")
    sw.add_argument("--time-budget", type=float, default=None, metavar="MINUTES",
                    help="stop the sweep after this long: running trials save last.pt and end with the reason, no "
                         "new trial starts; `--resume` continues it (with --resume: a budget for the continued part)")
    sw.add_argument("--perturbation-interval", type=int, default=None, metavar="EPOCHS",
                    help="pbt: epochs between exploit/explore steps (default 1)")
    sw.add_argument("--concurrency", type=int, default=None, help="trials at once (default: what the machine holds)")
    sw.add_argument("--cpus-per-trial", type=float, default=None, help="CPUs (= torch threads) per trial (default 1)")
    sw.add_argument("--gpus-per-trial", type=float, default=None,
                    help="GPU share per trial, e.g. 0.25 puts four on a GPU (default 0.25 with GPUs, else 0)")
    sw.add_argument("--address", default=None, metavar="HOST:PORT",
                    help="join a running Ray cluster (default $RAY_ADDRESS, else an embedded local Ray)")
    sw.add_argument("--runs-dir", type=Path, default=None, help="runs folder (default $BRNN_RUNS_DIR or ./runs)")
    sw.add_argument("--data-dir", type=Path, default=None, help="datasets folder (default $BRNN_DATA_DIR or ./data)")
    sw.add_argument("--name", default=None, help="a name for the sweep (part of its id)")
    sw.add_argument("--keep-best", type=int, default=DEFAULT_KEEP_BEST, metavar="K",
                    help="ended trials keeping last.pt: the best K (default 3); the others keep best.pt only")
    sw.add_argument("--keep-all-checkpoints", action="store_true", help="keep every trial's last.pt")
    sw.add_argument("--resume", metavar="SWEEP_ID", help="continue an interrupted sweep")
    sw.add_argument("--sweep-id", default=None, help=argparse.SUPPRESS)  # the dashboard picks the id it will show
    sw.set_defaults(func=cmd_sweep)
    return sw


def request_from(args) -> SweepRequest:
    return SweepRequest(search=args.search, config=args.config, sets=args.set, trials=args.trials,
                        scheduler=args.scheduler, metric=args.metric, perturbation_interval=args.perturbation_interval,
                        concurrency=args.concurrency, cpus_per_trial=args.cpus_per_trial,
                        gpus_per_trial=args.gpus_per_trial, address=args.address, name=args.name,
                        keep_best=args.keep_best, keep_all=args.keep_all_checkpoints, sweep_id=args.sweep_id,
                        search_alg=args.search_alg, grace_period=args.grace_period,
                        reduction_factor=args.reduction_factor, time_budget_min=args.time_budget)


def cmd_sweep(args) -> int:
    runs_dir = (args.runs_dir or default_runs_dir()).resolve()
    data_dir = (args.data_dir or default_data_dir()).resolve()
    printer = lambda line: print(line, flush=True)  # noqa: E731
    if args.resume:
        planned = {"--search": args.search, "--set": args.set, "--config": args.config, "--trials": args.trials,
                   "--scheduler": args.scheduler != "fifo", "--metric": args.metric != "val_loss",
                   "--perturbation-interval": args.perturbation_interval, "--concurrency": args.concurrency,
                   "--cpus-per-trial": args.cpus_per_trial, "--gpus-per-trial": args.gpus_per_trial,
                   "--address": args.address, "--name": args.name, "--keep-best": args.keep_best != DEFAULT_KEEP_BEST,
                   "--keep-all-checkpoints": args.keep_all_checkpoints,
                   "--search-alg": args.search_alg != "random", "--grace-period": args.grace_period != 1,
                   "--reduction-factor": args.reduction_factor != 2}
        given = [flag for flag, value in planned.items() if value]
        if given:
            raise SweepError(f"--resume continues a sweep as it was planned (its sweep.json): drop "
                             f"{', '.join(given)} (only --time-budget may be given: the continued part's own)")
        sweep = check_resume(args.resume, runs_dir, args.time_budget)
        return in_sweep_turn(runs_dir, sweep.id, lambda turn: resume_checked(sweep, printer, args.time_budget),
                             printer)
    request = request_from(args)
    plan = plan_sweep(request, runs_dir, data_dir)

    def work(turn) -> int:
        for dataset in plan.datasets():  # a missing download fails here, before Ray starts (once, not per trial)
            ensure_dataset(dataset, data_dir)
            # pen-stroke copies made once here, not by every trial at once; trials on this machine read the cache
            predraw(dataset, data_dir, plan.base["drawn_share"], progress=printer)
        return run_sweep(plan, request, runs_dir, data_dir, printer)

    return in_sweep_turn(runs_dir, plan.sweep_id, work, printer)


def in_sweep_turn(runs_dir: Path, sweep_id: str, work, printer) -> int:
    """`work(turn)` once the whole machine is free: the sweep waits in the queue (a job folder) behind what runs."""
    job = new_job(runs_dir, "sweep", EVERY_SLOT, title=f"sweep {sweep_id}")
    return in_turn(job, work, say=lambda message: printer(f"{message}; waiting (Ctrl-C cancels)"))

