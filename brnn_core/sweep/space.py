"""The search space: `--search KEY=SPEC` parsed and checked against `TrainConfig` before Ray starts.

The specs (choice, grid, uniform, loguniform, randint: docs/sweeps.md) are checked the way the Train form checks
a value: a spec whose values could ever be refused by `TrainConfig` is refused here, naming the key and the
problem, so a sweep never dies on trial 37. Nothing here imports Ray; `to_tune` converts a checked spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from brnn_core.config import ConfigError, TrainConfig

KINDS = ("choice", "grid", "uniform", "loguniform", "randint")
RANGE_KINDS = ("uniform", "loguniform", "randint")
NOT_SEARCHABLE = {"cpu_threads": "it is set by --cpus-per-trial (the trial's share of the CPU)",
                  "device": "every trial runs where the sweep's resources put it: set it with --set device=..., "
                            "and GPUs with --gpus-per-trial",
                  "tensorboard": "it decides what a trial records, not how it trains: set it with --set "
                                 "tensorboard=false",
                  "gradient_flow_every": "it decides what a trial records, not how it trains: set it with --set "
                                         "gradient_flow_every=0 (off) or another interval"}
SEARCHABLE = tuple(f for f in TrainConfig.field_names() if f not in NOT_SEARCHABLE)
# A starting spec per field for forms (the Sweep page): ranges that train in a few minutes on the sample.
SUGGESTED_SPECS = {"lr": "loguniform:0.0003:0.03", "hidden_size": "choice:32,64,128", "num_layers": "choice:1,2",
                   "batch_size": "choice:50,100,200", "dropout": "uniform:0:0.5", "grad_clip": "uniform:0.5:5",
                   "weight_decay": "loguniform:0.00001:0.01", "optimizer": "choice:adam,adamw,sgd",
                   "head": "choice:bidir,last", "seed": "randint:0:1000", "momentum": "uniform:0.5:0.99",
                   "cell": "choice:lstm,gru,rnn", "bidirectional": "choice:true,false"}
SPEC_HELP = ("choice:a,b,c (random pick) · grid:a,b,c (every value) · uniform:lo:hi · loguniform:lo:hi · "
             "randint:lo:hi (both ends included)")
PBT_FIELDS = ("lr", "grad_clip")  # what PBT may change inside a running trial (its live fields)
SCHEDULED_EPOCHS = "the scheduler decides how long each trial trains: set epochs with --set, do not search it"


class SweepError(ValueError):
    """A sweep that cannot start; the message names the key or option and what to change."""


class TrialStopped(RuntimeError):
    """A trial stopped with its sweep (not by its scheduler): Tune records it as not finished. Here, beside
    SweepError and away from Ray, so the driver's log filter can name it before Ray is imported."""


@dataclass(frozen=True)
class SearchSpec:
    """One searched field: `kind` and either the listed `values` or the range `low`..`high`."""

    key: str
    kind: str
    values: tuple = ()
    low: float | int | None = None
    high: float | int | None = None

    @property
    def text(self) -> str:
        """The spec as the user writes it (`loguniform:0.0001:0.1`)."""
        if self.kind in RANGE_KINDS:
            return f"{self.kind}:{self.low:g}:{self.high:g}"
        return f"{self.kind}:{','.join(str(v) for v in self.values)}"

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind, "spec": self.text}
        if self.kind in RANGE_KINDS:
            out.update(low=self.low, high=self.high)
        else:
            out["values"] = list(self.values)
        return out

    @classmethod
    def from_dict(cls, key: str, data: dict) -> SearchSpec:
        return cls(key, data["kind"], tuple(data.get("values") or ()), data.get("low"), data.get("high"))


def field_value(base: dict, key: str, raw: Any) -> Any:
    """`raw` as field `key` takes it (coerced and range-checked with the rest of `base`), or SweepError."""
    try:
        cfg = TrainConfig.from_dict({**base, key: raw}, check_device=False)
    except ConfigError as exc:
        raise SweepError(f"--search {key}: {raw!r} is not a valid {key}: "
                         f"{exc.errors.get(key) or next(iter(exc.errors.values()))}") from None
    return getattr(cfg, key)


def parse_spec(key: str, spec: str, base: dict) -> SearchSpec:
    """One `KEY=SPEC`: the key must be a TrainConfig field and every value the spec can produce valid."""
    key = key.strip().replace("-", "_")
    fields = TrainConfig.field_names()
    if key not in fields:
        raise SweepError(f"--search {key}: not a training field; searchable fields are "
                         f"{', '.join(f for f in fields if f not in NOT_SEARCHABLE)}")
    if key in NOT_SEARCHABLE:
        raise SweepError(f"--search {key}: cannot be searched: {NOT_SEARCHABLE[key]}")
    kind, sep, rest = spec.strip().partition(":")
    if kind not in KINDS or not sep or not rest.strip():
        raise SweepError(f"--search {key}={spec}: write the spec as one of choice:a,b,c  grid:a,b,c  "
                         "uniform:lo:hi  loguniform:lo:hi  randint:lo:hi")
    if kind in ("choice", "grid"):
        return _listed(key, kind, rest, base)
    return _ranged(key, kind, rest, base)


def _listed(key: str, kind: str, rest: str, base: dict) -> SearchSpec:
    raw = [v.strip() for v in rest.split(",")]
    if any(not v for v in raw):
        raise SweepError(f"--search {key}={kind}:{rest}: an empty value; separate values with commas, as in "
                         f"{kind}:0.01,0.001")
    values = tuple(field_value(base, key, v) for v in raw)
    if len(set(values)) != len(values):
        raise SweepError(f"--search {key}={kind}:{rest}: a value is listed twice")
    return SearchSpec(key, kind, values=values)


def _ranged(key: str, kind: str, rest: str, base: dict) -> SearchSpec:
    parts = rest.split(":")
    if len(parts) != 2:
        raise SweepError(f"--search {key}={kind}:{rest}: a range is {kind}:lo:hi (two numbers)")
    kind_of_field = type(getattr(TrainConfig(), key))
    words = {float: "a decimal number: use uniform or loguniform", int: "a whole number: use randint",
             bool: "true or false: use choice"}
    other = words.get(kind_of_field, "text: use choice")
    if kind == "randint" and kind_of_field is not int:
        raise SweepError(f"--search {key}: randint draws whole numbers but {key} is {other}")
    if kind != "randint" and kind_of_field is not float:
        raise SweepError(f"--search {key}: {kind} draws decimal numbers but {key} is {other}")
    low, high = (field_value(base, key, p.strip()) for p in parts)
    if not low < high and not (kind == "randint" and low == high):
        raise SweepError(f"--search {key}={kind}:{rest}: the low end must be below the high end")
    if kind == "loguniform" and low <= 0:
        raise SweepError(f"--search {key}={kind}:{rest}: loguniform needs a low end above 0 (its log must exist); "
                         "use uniform to include 0")
    return SearchSpec(key, kind, low=low, high=high)


def parse_search(items: list[str], base: dict, *, scheduler: str = "fifo") -> list[SearchSpec]:
    """Every `--search KEY=SPEC`, checked alone and against the scheduler."""
    if not items:
        raise SweepError("nothing to search: add at least one --search KEY=SPEC, as in "
                         "--search lr=loguniform:1e-4:1e-1")
    specs: dict[str, SearchSpec] = {}
    for item in items:
        key, sep, spec = item.partition("=")
        if not sep:
            raise SweepError(f"--search {item}: expected KEY=SPEC, as in --search lr=loguniform:1e-4:1e-1")
        parsed = parse_spec(key, spec, base)
        if parsed.key in specs:
            raise SweepError(f"--search {parsed.key}: given twice; keep one")
        specs[parsed.key] = parsed
    check_scheduler(list(specs.values()), scheduler)
    return list(specs.values())


def check_scheduler(specs: list[SearchSpec], scheduler: str) -> None:
    """What a scheduler can work with: PBT changes fields inside a running trial, so only live ones."""
    for spec in specs:
        if spec.key == "epochs" and scheduler in ("asha", "pbt"):
            raise SweepError(f"--search epochs with --scheduler {scheduler}: {SCHEDULED_EPOCHS}")
        if scheduler == "pbt" and spec.key not in PBT_FIELDS:
            raise SweepError(f"--search {spec.key} with --scheduler pbt: PBT changes a trial's settings while it "
                             f"trains, which only {' and '.join(PBT_FIELDS)} can do; search {spec.key} with "
                             "--scheduler fifo or asha, or fix it with --set")


def trial_count(specs: list[SearchSpec], samples: int) -> int:
    """Trials Tune will run: the samples times every combination of the grids."""
    return samples * math.prod(len(s.values) for s in specs if s.kind == "grid")


def default_samples(specs: list[SearchSpec]) -> int:
    """--trials when not given: one pass over the grids, or 8 random draws when something is random."""
    return 1 if all(s.kind == "grid" for s in specs) else 8


def to_tune(spec: SearchSpec):
    """The Ray Tune search domain for a checked spec (randint's high end is included, as documented)."""
    from ray import tune  # lazy: the CLI and the Sweep page check specs without loading ray

    if spec.kind == "choice":
        return tune.choice(list(spec.values))
    if spec.kind == "grid":
        return tune.grid_search(list(spec.values))
    if spec.kind == "uniform":
        return tune.uniform(spec.low, spec.high)
    if spec.kind == "loguniform":
        return tune.loguniform(spec.low, spec.high)
    return tune.randint(spec.low, spec.high + 1)


def to_mutation(spec: SearchSpec):
    """What PBT may resample a field from: the listed values, or the same distribution."""
    return list(spec.values) if spec.kind in ("choice", "grid") else to_tune(spec)
