"""Branches: a new run that starts from another run's checkpoint and continues its step axis.

`train --from RUN[:last|:best]` and the dashboard's "Branch from here" both call `create_branch`. A branch is an
ordinary run directory whose config.json names its parent, with the parent's checkpoint hard-linked in as
`checkpoints/parent.pt` (a snapshot: the parent may train on or be deleted). Its worker starts from that file
until the branch has a last.pt of its own. What may change and what may not (the architecture, whose weights
would not load; the seed and validation fraction, or it would validate on its parent's training images):
docs/cli.md, "Branching a run"; the directory: docs/run-directory.md, "Branches".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from brnn_core.checkpoint import Checkpoint, load_checkpoint
from brnn_core.config import OLDER_RUN_DEFAULTS, TrainConfig
from brnn_core.data.datasets import DATASETS
from brnn_core.runs.notes import read_notes, write_notes
from brnn_core.runs.retention import pruned_reason
from brnn_core.runs.rundir import Run, RunError, create_run, new_run_config, resolve_run

BRANCH_CHECKPOINTS = ("last", "best")
# The checkpoint's weights fix these (direction before head: a one-way net's head follows from it).
ARCHITECTURE_FIELDS = ("cell", "bidirectional", "hidden_size", "num_layers", "head", "input_scale")
SPLIT_FIELDS = ("seed", "val_fraction")  # these fix which images are validation images
PARENT_CKPT = "parent.pt"  # in the branch's checkpoints/: its starting point until it saves a last.pt


class BranchError(RunError):
    """A branch that cannot be made; the message names the problem and what to do instead."""


@dataclass
class BranchPlan:
    """A validated branch, not yet on disk: `create_planned` writes it."""

    parent: Run
    kind: str  # last | best
    checkpoint_path: Path
    checkpoint: Checkpoint
    cfg: TrainConfig  # the branch's full config (parent's values at the checkpoint + overrides)


@dataclass(frozen=True)
class BranchPoint:
    """Where a branch leaves its parent, for the Runs overlay."""

    child: str
    parent: str
    checkpoint: str
    step: int
    epoch: float


def parse_from(ref: str) -> tuple[str, str]:
    """'RUN' -> (RUN, 'last'); 'RUN:best' -> (RUN, 'best'). RUN is a run id or a run directory."""
    base, sep, kind = str(ref).rpartition(":")
    if sep and base and kind in BRANCH_CHECKPOINTS:
        return base, kind
    if sep and base and not Path(ref).exists():
        raise BranchError(f"{ref!r}: after ':' comes the checkpoint, last or best (as in RUN:best)")
    return str(ref), "last"


def parent_values(parent: Run, ckpt: Checkpoint) -> dict:
    """The parent's config as it stood when the checkpoint was saved (live changes included)."""
    known = set(TrainConfig.field_names())
    saved = {k: v for k, v in ckpt.train_config.items() if k in known}
    base = {k: v for k, v in parent.config().get("train", {}).items() if k in known} or saved
    values = {**base, **{k: v for k, v in ckpt.train_config.get("live", {}).items() if k in known}}
    values.setdefault("amp", OLDER_RUN_DEFAULTS["amp"])  # a parent from before the setting trained in fp32
    if values.get("amp") == "auto":  # the precision the parent trained in, as its first start resolved auto
        values["amp"] = parent.config().get("amp") or saved.get("amp") or "auto"
    return values


def default_epochs(parent_epochs: int, ckpt: Checkpoint) -> int:
    """The parent's plan when it had epochs left at the checkpoint, else one more epoch."""
    return parent_epochs if parent_epochs > ckpt.epoch else ckpt.epoch + 1


def plan_branch(runs_dir: Path, parent_ref: str | Path, kind: str = "last",
                overrides: dict | None = None) -> BranchPlan:
    """Check everything about a branch before anything is written; raises BranchError/ConfigError."""
    if kind not in BRANCH_CHECKPOINTS:
        raise BranchError(f"checkpoint {kind!r}: branch from last or best")
    parent = resolve_run(runs_dir, parent_ref)
    path = parent.last_ckpt if kind == "last" else parent.best_ckpt
    if not path.is_file():
        other = "best" if kind == "last" else "last"
        has_other = (parent.best_ckpt if kind == "last" else parent.last_ckpt).is_file()
        pruned = pruned_reason(parent, kind)
        why = "no epoch has finished yet" if kind == "best" else "it was never saved or has been removed"
        raise BranchError((f"{pruned}, so it cannot be branched from; " if pruned else
                           f"run {parent.id} has no {kind}.pt ({why}); ")
                          + (f"branch from {parent.id}:{other} instead" if has_other else "nothing to branch from"))
    ckpt = load_checkpoint(path)
    base = parent_values(parent, ckpt)
    overrides = dict(overrides or {})
    model = ckpt.model_config  # parents from before input_scale, cell or bidirectional: their checkpoint says
    values = {"input_scale": model.input_scale, "cell": model.cell, "bidirectional": model.bidirectional, **base,
              **overrides}
    if "bidirectional" in overrides and "head" not in overrides:
        values["head"] = "auto"  # the direction asked for is refused below as the architecture it is
    if "epochs" not in overrides:
        values["epochs"] = default_epochs(int(base.get("epochs", 1)), ckpt)
    cfg = TrainConfig.from_dict(values)
    check_branch_config(cfg, base, ckpt, parent.id)
    return BranchPlan(parent, kind, path, ckpt, cfg)


def check_branch_config(cfg: TrainConfig, base: dict, ckpt: Checkpoint, parent_id: str) -> None:
    """Refuse what a branch cannot change, each with the field, the values and what to do instead."""
    model = ckpt.model_config
    for name in ARCHITECTURE_FIELDS:
        old, new = getattr(model, name), getattr(cfg, name)
        if old != new:
            old, new = (str(v).lower() if isinstance(v, bool) else v for v in (old, new))  # as --set takes them
            raise BranchError(f"{name}: a branch keeps its parent's architecture ({name}={old}) because it starts "
                              f"from its weights; {name}={new} needs new weights: start a new run instead "
                              f"(python -m brnn_core train --set {name}={new})")
    for name in SPLIT_FIELDS:
        if name in base and getattr(cfg, name) != base[name]:
            raise BranchError(f"{name}: a branch keeps its parent's {name} ({base[name]}), so it validates on images "
                              f"its parent never trained on; to change it, start a new run instead")
    classes = len(DATASETS[cfg.dataset].classes)
    if classes != model.num_classes:
        raise BranchError(f"dataset {cfg.dataset} has {classes} classes but {parent_id}'s model predicts "
                          f"{model.num_classes}; branch on a dataset with {model.num_classes} classes")
    if cfg.epochs <= ckpt.epoch:
        raise BranchError(f"epochs={cfg.epochs}: epochs counts the parent's epochs too and the checkpoint is at "
                          f"epoch {ckpt.epoch}; set epochs to at least {ckpt.epoch + 1}")


def create_planned(plan: BranchPlan, data_dir: Path | None = None, *, keep_tags: bool = False) -> Run:
    """Write the branch's run directory (beside its parent) with the parent's checkpoint linked in; with
    `keep_tags` it starts with its parent's tags (never by default: a tag often says what that run was)."""
    config = new_run_config(plan.cfg, data_dir)
    config["parent"] = {"run_id": plan.parent.id, "checkpoint": plan.kind, "step": plan.checkpoint.step,
                        "epoch": plan.checkpoint.epoch}
    run = create_run(plan.parent.path.parent, config, files={f"checkpoints/{PARENT_CKPT}": plan.checkpoint_path})
    tags = read_notes(plan.parent.path).tags if keep_tags else ()
    if tags:
        write_notes(run.path, tags=tags)
    return run


def create_branch(runs_dir: Path, parent_ref: str | Path, kind: str = "last", overrides: dict | None = None, *,
                  data_dir: Path | None = None, keep_tags: bool = False) -> Run:
    """Validate and create a branch of `parent_ref` (a run id in runs_dir, or a run directory); not started."""
    return create_planned(plan_branch(runs_dir, parent_ref, kind, overrides), data_dir, keep_tags=keep_tags)


# ---------------------------------------------------------------- the worker's side
def parent_of(run: Run) -> dict | None:
    parent = run.config().get("parent")
    return parent if isinstance(parent, dict) and parent.get("run_id") else None


# ---------------------------------------------------------------- for the pages
def with_parents(runs_dir: Path, run_ids: Iterable[str]) -> list[str]:
    """`run_ids` followed by their ancestors that are still in runs_dir (a branch's parent, its parent...)."""
    out = list(dict.fromkeys(run_ids))
    for rid in out:  # grows while iterating: ancestors of ancestors
        parent = parent_of(Run(Path(runs_dir) / rid))
        if parent and parent["run_id"] not in out and Run(Path(runs_dir) / parent["run_id"]).exists():
            out.append(parent["run_id"])
    return out


def branch_points(runs_dir: Path, run_ids: Iterable[str]) -> list[BranchPoint]:
    """Where each of `run_ids` that is a branch leaves its parent."""
    points = []
    for rid in run_ids:
        parent = parent_of(Run(Path(runs_dir) / rid))
        if parent:
            points.append(BranchPoint(rid, parent["run_id"], str(parent.get("checkpoint", "last")),
                                      int(parent.get("step", 0)), float(parent.get("epoch", 0))))
    return points


def branch_defaults(parent: Run, kind: str) -> dict:
    """The branch form's starting values for `parent`'s `kind` checkpoint (lr, grad_clip, epochs, optimizer)."""
    ckpt = load_checkpoint(parent.last_ckpt if kind == "last" else parent.best_ckpt)
    base = {**TrainConfig().to_dict(), **parent_values(parent, ckpt)}
    return {"lr": float(base["lr"]), "grad_clip": float(base["grad_clip"]), "optimizer": base["optimizer"],
            "epochs": default_epochs(int(base["epochs"]), ckpt), "min_epochs": ckpt.epoch + 1,
            "step": ckpt.step, "epoch": ckpt.epoch}
