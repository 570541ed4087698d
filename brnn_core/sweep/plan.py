"""From what was asked (`SweepRequest`: the CLI's options or the Sweep page's form) to a checked `SweepPlan`.

Everything a user can get wrong is found here, before Ray starts and before anything is written:
the base config, every search spec, the scheduler's needs, the resources this machine has, and
whether the cluster address answers. Each problem is one `SweepError` naming the option and the fix.
"""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from brnn_core.config import AUTO_HEAD, ConfigError, TrainConfig, load_train_config, train_values
from brnn_core.sweep.records import METRICS, new_sweep_id, sweeps_dir
from brnn_core.sweep.space import SearchSpec, SweepError, default_samples, parse_search, trial_count
from brnn_core.text import plural

SCHEDULERS = ("fifo", "asha", "pbt")
SEARCH_ALGS = ("random", "tpe")  # tpe: Optuna's Tree-structured Parzen Estimator through Ray Tune's OptunaSearch
DEFAULT_GPU_SHARE = 0.25  # four small BiLSTMs per GPU by default (docs/decisions/013-sweep-concurrency.md)
DEFAULT_KEEP_BEST = 3  # ended trials that keep last.pt (the best k); the others keep best.pt only
CONNECT_TIMEOUT_S = 5.0


@dataclass
class SweepRequest:
    """A sweep as asked for, values as typed."""

    search: list[str]
    config: str | None = None
    sets: list[str] = field(default_factory=list)
    trials: int | None = None
    scheduler: str = "fifo"
    metric: str = "val_loss"
    perturbation_interval: int | None = None
    concurrency: int | None = None
    cpus_per_trial: float | None = None
    gpus_per_trial: float | None = None
    address: str | None = None
    name: str | None = None
    keep_best: int = DEFAULT_KEEP_BEST
    keep_all: bool = False
    sweep_id: str | None = None
    search_alg: str = "random"
    grace_period: int = 1
    reduction_factor: int = 2
    time_budget_min: float | None = None


@dataclass
class SweepPlan:
    """A checked sweep: everything the driver needs, also what sweep.json records (`to_dict`)."""

    sweep_id: str
    name: str
    base: dict
    specs: list[SearchSpec]
    samples: int
    trials: int
    scheduler: str
    metric: str
    perturbation_interval: int
    concurrency: int
    cpus_per_trial: float
    gpus_per_trial: float
    address: str | None  # None: an embedded local Ray
    keep_best: int | None  # None: keep every last.pt
    search_alg: str = "random"
    grace_period: int = 1  # asha: epochs every trial trains before it can be stopped
    reduction_factor: int = 2  # asha: only the best 1/N of the trials at a rung go on
    time_budget_s: float | None = None  # trials still running then are stopped, last.pt kept

    @property
    def mode(self) -> str:
        return METRICS[self.metric][1]

    def datasets(self) -> list[str]:
        """Every dataset a trial can train on: the base one, or the listed values when dataset is searched."""
        searched = next((s for s in self.specs if s.key == "dataset"), None)
        return list(dict.fromkeys(searched.values)) if searched else [self.base["dataset"]]

    def to_dict(self) -> dict:
        out = asdict(self)
        out["specs"] = {s.key: s.to_dict() for s in self.specs}
        return out

    @classmethod
    def from_dict(cls, data: dict) -> SweepPlan:
        data = dict(data)
        data["specs"] = [SearchSpec.from_dict(k, v) for k, v in data["specs"].items()]
        return cls(**data)


def base_config(request: SweepRequest, data_dir: Path) -> TrainConfig:
    """--config then --set, read exactly as `train` reads them."""
    return load_train_config(request.config, request.sets, data_dir, check_device=request.address is None)


def plan_sweep(request: SweepRequest, runs_dir: Path, data_dir: Path) -> SweepPlan:
    """Check everything that can be checked without Ray; raises SweepError or ConfigError."""
    if request.scheduler not in SCHEDULERS:
        raise SweepError(f"--scheduler {request.scheduler}: use one of {', '.join(SCHEDULERS)}")
    if request.metric not in METRICS:
        raise SweepError(f"--metric {request.metric}: use one of {', '.join(METRICS)}")
    try:
        cfg = base_config(request, data_dir)
    except ConfigError as exc:
        raise SweepError(f"the base config (--config/--set) is not valid:\n{exc}".replace("invalid training config:\n",
                                                                                          "")) from None
    base = cfg.to_dict()
    if str(train_values(request.config, request.sets, data_dir).get("head", AUTO_HEAD)).strip() == AUTO_HEAD:
        base["head"] = AUTO_HEAD  # each trial's head follows its own direction (a searched one too)
    specs = parse_search(request.search, base, scheduler=request.scheduler)
    check_search_alg(request, specs)
    check_init_from(cfg, specs)
    check_budgets(request, cfg)
    samples = request.trials if request.trials is not None else default_samples(specs)
    if samples < 1:
        raise SweepError(f"--trials {samples}: at least 1")
    if request.keep_best < 0:
        raise SweepError(f"--keep-best {request.keep_best}: 0 or more")
    total = trial_count(specs, samples)
    interval = check_schedule(request, cfg, total)
    address = cluster_address(request.address)
    cpus, gpus, concurrency = resources(request, cfg, total, local=address is None)
    sweep_id = request.sweep_id or new_sweep_id(request.name)
    if (sweeps_dir(runs_dir) / sweep_id / "sweep.json").exists():
        raise SweepError(f"sweep {sweep_id} already exists in {sweeps_dir(runs_dir)}")
    base.update(cpu_threads=max(1, round(cpus)), best_by=request.metric)  # best.pt by the metric
    return SweepPlan(sweep_id=sweep_id, name=request.name or sweep_id, base=base, specs=specs, samples=samples,
                     trials=total, scheduler=request.scheduler, metric=request.metric, perturbation_interval=interval,
                     concurrency=concurrency, cpus_per_trial=cpus, gpus_per_trial=gpus, address=address,
                     keep_best=None if request.keep_all else request.keep_best, search_alg=request.search_alg,
                     grace_period=request.grace_period, reduction_factor=request.reduction_factor,
                     time_budget_s=None if request.time_budget_min is None else 60.0 * request.time_budget_min)


# What a fine-tuned trial's starting checkpoint fixes (warmstart.initial_checkpoint checks each against it).
FIXED_BY_INIT_FROM = ("cell", "bidirectional", "hidden_size", "num_layers", "head", "input_scale", "dataset")


def check_init_from(cfg: TrainConfig, specs: list[SearchSpec]) -> None:
    """With init_from set, every trial starts from that checkpoint: refuse a search over what it fixes, and a
    file that does not fit the base config, here rather than in every trial."""
    from brnn_core.checkpoint import CheckpointError
    from brnn_core.data.datasets import DATASETS
    from brnn_core.training.warmstart import initial_checkpoint

    searched = {spec.key: spec for spec in specs}
    fixed = [key for key in FIXED_BY_INIT_FROM if key in searched]
    if fixed and (cfg.init_from or "init_from" in searched):
        raise SweepError(f"--search {', '.join(fixed)} with init_from: every trial starts from that checkpoint, "
                         "whose architecture and classes are fixed; search other fields, or drop init_from")
    starts = list(searched["init_from"].values) if "init_from" in searched else [cfg.init_from]
    for start in starts:
        try:
            initial_checkpoint(cfg.replace(init_from=str(start)), list(DATASETS[cfg.dataset].classes))
        except (CheckpointError, ConfigError, OSError) as exc:
            raise SweepError(f"init_from: {exc}") from None


def check_budgets(request: SweepRequest, cfg: TrainConfig) -> None:
    """ASHA's grace period and reduction factor, and the time budget, each with its allowed range."""
    if request.time_budget_min is not None and request.time_budget_min <= 0:
        raise SweepError(f"--time-budget {request.time_budget_min:g}: minutes above 0")
    asha_options = request.grace_period != 1 or request.reduction_factor != 2
    if asha_options and request.scheduler != "asha":
        raise SweepError("--grace-period and --reduction-factor only apply to --scheduler asha")
    if not 1 <= request.grace_period < max(cfg.epochs, 2):
        raise SweepError(f"--grace-period {request.grace_period}: between 1 and epochs - 1 ({cfg.epochs - 1}); every "
                         "trial trains that many epochs before ASHA may stop it")
    if request.reduction_factor < 2:
        raise SweepError(f"--reduction-factor {request.reduction_factor}: at least 2 (2 keeps the best half at each "
                         "rung, 3 the best third)")


def check_search_alg(request: SweepRequest, specs: list[SearchSpec]) -> None:
    """TPE models the results so far to pick the next trial: it needs ranges or choices to draw from."""
    if request.search_alg not in SEARCH_ALGS:
        raise SweepError(f"--search-alg {request.search_alg}: use one of {', '.join(SEARCH_ALGS)}")
    if request.search_alg == "random":
        return
    if request.scheduler == "pbt":
        raise SweepError("--search-alg tpe: PBT brings its own search (it copies and perturbs good trials); use "
                         "--scheduler fifo or asha with tpe, or pbt with random")
    grids = [s.key for s in specs if s.kind == "grid"]
    if grids:
        raise SweepError(f"--search-alg tpe cannot take grid specs ({', '.join(grids)}): TPE picks values itself; "
                         f"write them as choice:... instead")


def check_schedule(request: SweepRequest, cfg: TrainConfig, total: int) -> int:
    """The scheduler's own needs; returns PBT's perturbation interval in epochs (0 for the others)."""
    if request.perturbation_interval is not None and request.scheduler != "pbt":
        raise SweepError("--perturbation-interval only applies to --scheduler pbt")
    if request.scheduler == "fifo":
        return 0
    if cfg.epochs < 2:
        raise SweepError(f"--scheduler {request.scheduler} acts between epochs: set at least 2 (--set epochs=3)")
    if request.scheduler == "asha":
        return 0
    if total < 2:
        raise SweepError(f"--scheduler pbt copies good trials into bad ones: it needs at least 2 trials, not {total}")
    interval = request.perturbation_interval or 1
    if not 1 <= interval < cfg.epochs:
        raise SweepError(f"--perturbation-interval {interval}: between 1 and epochs - 1 ({cfg.epochs - 1})")
    return interval


def ray_address_file() -> Path:
    """Where `ray start --head` writes its address on this machine (Ray's own `auto` reads it)."""
    return Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray" / "ray_current_cluster"


def cluster_address(address: str | None) -> str | None:
    """--address, else $RAY_ADDRESS, as HOST:PORT (`auto`: the head started on this machine), checked to
    answer on TCP now, so a typo fails in seconds, not minutes. None: an embedded Ray."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None or address == "local":
        return None
    if address == "auto":
        found = ray_address_file()
        text = found.read_text().strip() if found.is_file() else ""
        if not text:
            raise SweepError(f"--address auto: no Ray head was started on this machine ({found} is missing). Start "
                             "one with `ray start --head --port=PORT`, give its HOST:PORT, or drop --address to run "
                             "on this machine")
        address = text
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SweepError(f"--address {address}: write it as HOST:PORT (the head's `ray start --head --port=PORT`) "
                         "or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise SweepError(f"--address {address}: nothing answers there ({exc.strerror or exc}). Start the head "
                         f"with `ray start --head --port={port}` on {host}, or drop --address to run on this "
                         "machine") from None
    return address


def local_gpus() -> int:
    return torch.cuda.device_count()


def resources(request: SweepRequest, cfg: TrainConfig, total: int, *, local: bool) -> tuple[float, float, int]:
    """(cpus, gpus per trial, concurrency): defaults fitted to this machine, or checked against it."""
    cpus = request.cpus_per_trial if request.cpus_per_trial is not None else 1.0
    if cpus <= 0:
        raise SweepError(f"--cpus-per-trial {cpus:g}: must be above 0")
    gpus_here = local_gpus() if local else None
    gpus = request.gpus_per_trial
    if gpus is None:
        gpus = DEFAULT_GPU_SHARE if gpus_here and cfg.device != "cpu" else 0.0
    if gpus < 0 or (gpus > 1 and not float(gpus).is_integer()):
        raise SweepError(f"--gpus-per-trial {gpus:g}: a share of one GPU (0.25) or whole GPUs (2)")
    if gpus > 0 and gpus_here == 0:
        raise SweepError(f"--gpus-per-trial {gpus:g}: this machine has no CUDA GPU; drop --gpus-per-trial to train "
                         "on the CPU, or give --address of a cluster with GPUs")
    if gpus_here and gpus > gpus_here:  # no trial could ever be placed: the sweep would wait forever
        raise SweepError(f"--gpus-per-trial {gpus:g}: this machine has {plural(gpus_here, 'GPU')}; ask for at most "
                         f"{gpus_here}, or give --address of a cluster with bigger machines")
    if gpus == 0 and cfg.device.startswith("cuda"):
        raise SweepError(f"device {cfg.device} needs a GPU for each trial: add --gpus-per-trial (0.25 shares one GPU "
                         "between four trials)")
    if request.concurrency is not None:
        if request.concurrency < 1:
            raise SweepError(f"--concurrency {request.concurrency}: at least 1")
        return cpus, gpus, request.concurrency
    fit = int((os.cpu_count() or 1) // cpus) if local else total
    if gpus and gpus_here:
        fit = min(fit, int(gpus_here // gpus))
    return cpus, gpus, max(1, min(total, fit))


def fit_cluster(plan: SweepPlan, request: SweepRequest, available: dict) -> None:
    """With --address: check the cluster can hold one trial, and fit the default concurrency to it."""
    gpus_there = float(available.get("GPU", 0))
    if request.gpus_per_trial is None and gpus_there and plan.base.get("device") != "cpu":
        plan.gpus_per_trial = DEFAULT_GPU_SHARE
    if plan.gpus_per_trial > gpus_there:
        raise SweepError(f"--gpus-per-trial {plan.gpus_per_trial:g}: the cluster at {plan.address} has "
                         f"{gpus_there:g} GPU(s); lower it or add GPU machines (`ray start --address=...`)")
    cpus_there = float(available.get("CPU", 0))
    if plan.cpus_per_trial > cpus_there:
        raise SweepError(f"--cpus-per-trial {plan.cpus_per_trial:g}: the cluster at {plan.address} has "
                         f"{cpus_there:g} CPU(s)")
    if request.concurrency is None:
        fit = int(cpus_there // plan.cpus_per_trial)
        if plan.gpus_per_trial:
            fit = min(fit, int(gpus_there // plan.gpus_per_trial))
        plan.concurrency = max(1, min(plan.trials, fit))


def describe(plan: SweepPlan, *, with_id: bool = True) -> str:
    """One line saying what will run, printed before Ray starts (and under the Sweep page's form)."""
    space = ", ".join(f"{s.key} {s.text}" for s in plan.specs)
    where = f"cluster {plan.address}" if plan.address else "this machine (embedded Ray on 127.0.0.1)"
    gpu = f", {plan.gpus_per_trial:g} GPU" if plan.gpus_per_trial else ""
    asha = f" (grace period {plan.grace_period}, reduction factor {plan.reduction_factor})" \
        if plan.scheduler == "asha" else ""
    search = f"; search {plan.search_alg}" if plan.search_alg != "random" else ""
    budget = f"; time budget {plan.time_budget_s / 60:g} min" if plan.time_budget_s else ""
    return (f"{f'sweep {plan.sweep_id}: ' if with_id else ''}{plural(plan.trials, 'trial')} of {space}; scheduler "
            f"{plan.scheduler}{asha} on {plan.metric}{search}{budget}; {plan.concurrency} at a time, "
            f"{plan.cpus_per_trial:g} CPU{gpu} each; {where}")
