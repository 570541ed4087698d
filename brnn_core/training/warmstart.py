"""Starting training from a checkpoint, every way it happens, in one place.

`choose_start` picks how a run starts and is the only place that does: a fresh model, `init_from` (weights only,
step 0), a branch's first start (`parent.pt`), a resume from last.pt, or a PBT exploit (`resume_from`). All go
through `start_from_checkpoint`. Loading an optimizer state brings back the hyperparameters saved with it, so the
values the optimizer was built with are put back after it; the lr is the training session's to set (from the
live values `choose_start` returns), so nothing here assigns it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from brnn_core.checkpoint import Checkpoint, CheckpointError, check_state_matches, load_checkpoint
from brnn_core.config import TrainConfig
from brnn_core.fileio import keep_rows
from brnn_core.model import network_name
from brnn_core.runs.branch import PARENT_CKPT, parent_of
from brnn_core.runs.gradient_flow import drop_from
from brnn_core.runs.progress import epoch_shown
from brnn_core.runs.protocol import ACKS, SET, change_message
from brnn_core.runs.rundir import Run
from brnn_core.text import plural
from brnn_core.training.recorder import Position, best_score


@dataclass
class WarmStart:
    """What `start_from_checkpoint` did: where training stands now and how the optimizer starts."""

    position: Position  # the checkpoint's epoch, batch and step (best_val unknown: inf)
    optimizer_restored: bool  # False: a fresh optimizer state (see `fresh_reason`)
    fresh_reason: str = ""  # why the optimizer state was not restored, for the run's event log
    checkpoint: Checkpoint | None = field(default=None, repr=False)


def optimizer_name(optimizer: torch.optim.Optimizer) -> str:
    """The config name of an optimizer built by engine.make_optimizer (Adam -> adam, SGD -> sgd)."""
    return type(optimizer).__name__.lower()


@dataclass
class StartPoint:
    """How a run begins: where it stands, the live values a checkpoint brought back, a note for the start event."""

    position: Position
    live: dict = field(default_factory=dict)  # LIVE_FIELDS values saved with the checkpoint a resume continues
    note: str | None = None


def start_from_checkpoint(source: Path | Checkpoint, model: torch.nn.Module,
                          optimizer: torch.optim.Optimizer) -> WarmStart:
    """Load `source`'s weights into `model` and, when it fits, its optimizer state into `optimizer`.

    `optimizer` must be built with the hyperparameters wanted from now on (make_optimizer with the
    new config): after the saved state is loaded, those are written back over the saved ones, all but
    the lr, which the session sets before the first step. The optimizer starts fresh when the checkpoint
    has no optimizer state (best.pt keeps weights only) or was trained with another optimizer type.
    Raises CheckpointError when the weights do not fit the model, naming the layers.
    """
    ckpt = source if isinstance(source, Checkpoint) else load_checkpoint(source)
    check_state_matches(model.state_dict(), ckpt.model_state)
    model.load_state_dict(ckpt.model_state)
    restored, reason = _load_optimizer(ckpt, optimizer)
    position = Position(ckpt.epoch, ckpt.batch_in_epoch, ckpt.step, math.inf)
    return WarmStart(position, restored, reason, ckpt)


def _load_optimizer(ckpt: Checkpoint, optimizer: torch.optim.Optimizer) -> tuple[bool, str]:
    """Load the saved optimizer state, keeping the hyperparameters `optimizer` was built with."""
    if not ckpt.optimizer_state:
        return False, "the checkpoint carries no optimizer state (best.pt keeps only the weights)"
    saved = str(ckpt.train_config.get("optimizer") or "")
    wanted = optimizer_name(optimizer)
    if saved and saved != wanted:
        return False, f"the optimizer changed ({saved} -> {wanted}): its saved state does not apply"
    built = [{k: v for k, v in group.items() if k not in ("params", "lr")} for group in optimizer.param_groups]
    try:
        optimizer.load_state_dict(ckpt.optimizer_state)
    except (ValueError, KeyError) as exc:  # another parameter layout: refuse, do not half-load
        raise CheckpointError(f"the checkpoint's optimizer state does not fit this model ({exc})") from None
    for group, values in zip(optimizer.param_groups, built, strict=True):
        group.update(values)  # the saved weight decay, momentum... give way to the new ones
    return True, ""


def choose_start(run: Run, cfg: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               classes: list[str], *, resume: bool, resume_from: Path | None = None,
               scaler: torch.amp.GradScaler | None = None) -> StartPoint:
    """Where training starts, the live values it brings back, a note for the start event: the one place a
    start is chosen."""
    note = load_initial_weights(model, cfg, classes)  # fine-tuning: cfg.init_from's weights, step 0
    if unstarted_branch(run):
        return StartPoint(start_branch(run, cfg, model, optimizer), {}, note)
    if resume:
        position, live = restore(run, model, optimizer, resume_from, scaler=scaler)
        return StartPoint(position, live, note)
    return StartPoint(Position(), {}, note)


def load_initial_weights(model: torch.nn.Module, cfg: TrainConfig, classes: list[str]) -> str | None:
    """Copy `cfg.init_from`'s weights into `model`; a line for the event log, or None when not set."""
    ckpt = initial_checkpoint(cfg, classes)
    if ckpt is None:
        return None
    check_state_matches(model.state_dict(), ckpt.model_state)
    model.load_state_dict(ckpt.model_state)
    return f"weights from {Path(cfg.init_from).expanduser()} (trained {ckpt.epoch} epochs, {ckpt.step} steps)"


def initial_checkpoint(cfg: TrainConfig, classes: list[str]) -> Checkpoint | None:
    """`cfg.init_from` loaded and checked against the run's architecture and `classes` (None when not set);
    the CLI calls it before creating a run, so a wrong file is refused before anything is written."""
    if not cfg.init_from:
        return None
    path = Path(cfg.init_from).expanduser()
    ckpt = load_checkpoint(path)
    mc = ckpt.model_config
    fix = (f"set cell={mc.cell} bidirectional={str(mc.bidirectional).lower()} hidden_size={mc.hidden_size} "
           f"num_layers={mc.num_layers} head={mc.head} input_scale={mc.input_scale} to match it")
    fixed = ("cell", "bidirectional", "hidden_size", "num_layers", "head", "input_scale")
    if any(getattr(mc, k) != getattr(cfg, k) for k in fixed):
        raise CheckpointError(f"init_from {path} is a {network_name(mc)} of hidden {mc.hidden_size}, "
                              f"{plural(mc.num_layers, 'layer')} with head {mc.head} and input_scale {mc.input_scale}; "
                              f"this run asks for a {network_name(cfg)} of hidden {cfg.hidden_size}, "
                              f"{plural(cfg.num_layers, 'layer')}, "
                              f"head {cfg.head}, input_scale {cfg.input_scale}: {fix}")
    if mc.num_classes != len(classes) or (not ckpt.bare and list(ckpt.classes) != list(classes)):
        raise CheckpointError(f"init_from {path} predicts {', '.join(ckpt.classes)}, but {cfg.dataset} has "
                              f"{', '.join(classes)}: start from a checkpoint trained on {cfg.dataset}")
    return ckpt


def restore(run: Run, model: torch.nn.Module, optimizer: torch.optim.Optimizer, source: Path | None = None, *,
            scaler: torch.amp.GradScaler | None = None) -> tuple[Position, dict]:
    """Continue from the run's last.pt (or `source`): weights, optimizer state and the fp16 loss scale;
    returns where it was and the live values saved with it."""
    if source is None and not run.last_ckpt.is_file():
        run.log_event("resume", "no checkpoint was saved yet: starting again from step 0", step=0)
        run.metrics_path.write_text(run.metrics_path.read_text().splitlines(keepends=True)[0])
        drop_from(run.gradient_flow_path, 0)
        return Position(), {}
    path = source or run.last_ckpt
    ckpt = load_checkpoint(path)
    try:  # a last.pt of another architecture: name the layers and shapes, not torch's raw error
        start_from_checkpoint(ckpt, model, optimizer)
    except CheckpointError as exc:
        raise CheckpointError(f"{path} does not belong to this run: {exc}") from None
    if scaler is not None and ckpt.scaler_state:
        scaler.load_state_dict(ckpt.scaler_state)
    best_by = run.config().get("train", {}).get("best_by", "val_loss")
    best_val = best_score(best_by, load_checkpoint(run.best_ckpt).metrics) if run.best_ckpt.is_file() \
        else math.inf
    dropped = drop_metrics_after(run, ckpt.step)
    drop_from(run.gradient_flow_path, ckpt.step)  # measured again at this step, on the same weights, if due
    epochs = (run.read_status().get("live") or {}).get("epochs")  # the epoch as its progress line counted it
    run.log_event("resume", f"resumed from {'last.pt' if source is None else source} in epoch "
                            f"{epoch_shown(ckpt.epoch, epochs)}, step {ckpt.step}"
                  + (f" ({dropped} metric rows logged after that checkpoint were dropped)" if dropped else ""),
                  step=ckpt.step)
    return Position(ckpt.epoch, ckpt.batch_in_epoch, ckpt.step, best_val), dict(ckpt.train_config.get("live") or {})


def drop_metrics_after(run: Run, step: int) -> int:
    """Remove metrics rows past `step` (logged after the checkpoint a resume starts from), so no step repeats."""
    return keep_rows(run.metrics_path, lambda row_step: row_step <= step)


def unstarted_branch(run: Run) -> bool:
    """A branch that has not saved a last.pt of its own yet: it starts from its parent's checkpoint."""
    return parent_of(run) is not None and not run.last_ckpt.is_file()


def start_branch(run: Run, cfg: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Position:
    """Load the parent's checkpoint into the fresh model and optimizer; log how the branch starts."""
    parent = parent_of(run)
    where = f"{parent['run_id']}'s {parent.get('checkpoint', 'last')}.pt"
    path = run.checkpoint_dir / PARENT_CKPT
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the copy of {where} this branch starts from is gone; "
                              "create the branch again")
    try:
        warm = start_from_checkpoint(path, model, optimizer)
    except CheckpointError as exc:
        raise CheckpointError(f"{where} does not fit this branch: {exc}") from None
    run.metrics_path.write_text(run.metrics_path.read_text().splitlines(keepends=True)[0])  # header only
    ckpt, position = warm.checkpoint, warm.position
    drop_from(run.gradient_flow_path, 0)  # a branch that failed before its first last.pt starts again
    saved = ckpt.train_config
    if position.batch and any(saved.get(k) != getattr(cfg, k) for k in ("dataset", "batch_size")):
        position.batch = 0  # other batches: the unfinished epoch starts again from its first batch
    state = "weights and optimizer state" if warm.optimizer_restored else \
        f"weights, fresh optimizer state: {warm.fresh_reason}"
    run.log_event("branch", f"branched from {where} at epoch {ckpt.epoch}, step {ckpt.step}: {state}",
                  step=position.step, parent=parent["run_id"], checkpoint=parent.get("checkpoint"),
                  optimizer_restored=warm.optimizer_restored)
    log_changes(run, {**saved, **saved.get("live", {})}, cfg, position.step)
    return position


def log_changes(run: Run, before: dict, cfg: TrainConfig, step: int) -> None:
    """One `set` event per field the branch changed, in the form of a live change (source: branch)."""
    for name in TrainConfig.field_names():
        old, new = before.get(name), getattr(cfg, name)
        if old is not None and old != new:
            run.log_event(ACKS[SET], change_message(name, old, new, step, " (branch)"), step=step,
                          field=name, old=old, new=new, source="branch")


def drop_start_copy(run: Run) -> None:
    """Once a branch has its own last.pt, its copy of the parent's checkpoint is not needed again."""
    if run.last_ckpt.is_file():
        (run.checkpoint_dir / PARENT_CKPT).unlink(missing_ok=True)
