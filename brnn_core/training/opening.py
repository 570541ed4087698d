"""Building a run's training session from its run directory: device, threads, data, model, optimizer, the warm
start (warmstart.choose_start) and the drawing mix; what it found goes into config.json."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from brnn_core import environment
from brnn_core.config import OLDER_RUN_DEFAULTS, TrainConfig, resolve_augment, resolve_drawn_share
from brnn_core.devices import run_amp
from brnn_core.fileio import atomic_write_json
from brnn_core.model import RecurrentClassifier
from brnn_core.runs.rundir import Run
from brnn_core.training.commands import LiveSettings
from brnn_core.training.control import ControlReader
from brnn_core.training.drawing_mix import DrawingMix
from brnn_core.training.engine import eval_batch_size_for, evaluate, grad_scaler, make_optimizer
from brnn_core.training.session import Printer, TrainingSession
from brnn_core.training.splits import Splits, device_name, load_splits, model_config_for, prepare_device
from brnn_core.training.threads import ThreadKeeper
from brnn_core.training.warmstart import choose_start


@dataclass
class Opened:
    """A session ready for its first step and what it trains on."""

    session: TrainingSession
    splits: Splits
    mix: DrawingMix | None
    config: dict
    keeper: ThreadKeeper | None
    note: str | None  # how it began, for the start event (fine-tuning's weights)


def run_config(run: Run) -> TrainConfig:
    """The run's TrainConfig, a key it lacks filled with what it trained with before the setting existed."""
    train = run.config().get("train")
    if train is None:  # unreadable or damaged: never train the defaults in its place
        raise ValueError(f"{run.config_path} holds no training settings (the file is damaged or cannot be read); "
                         "restore it, or start a new run")
    return TrainConfig.from_dict({**OLDER_RUN_DEFAULTS, **train})


@dataclass(frozen=True)
class StartOptions:
    """How a run is started here, beyond its config.json (training.worker.train_run_dir documents each)."""

    resume: bool = False
    printer: Printer | None = None
    after_epoch: Callable[[int, dict], None] | None = None
    resume_from: Path | None = None
    before_start: Callable[[TrainingSession], None] | None = None
    handoff: tuple[int, float] | None = None
    device: str | None = None  # the queue's slot: it takes the place of the config's (the free GPU for `auto`)


def open_session(run: Run, data_dir: Path, how: StartOptions, control: ControlReader) -> Opened:
    """Device, threads, data, model, optimizer, warm start and drawing mix for `run`: its session, reading
    commands with `control`."""
    printer = how.printer or (lambda kind, info: None)
    config, cfg = run.config(), run_config(run)
    device = prepare_device(dataclasses.replace(cfg, device=how.device) if how.device else cfg)
    environment.record(run, device)  # environment.json: the code, packages and machine of this start
    cfg = cfg.replace(amp=run_amp(cfg.amp, config.get("amp"), device))  # auto: as it first resolved
    keeper = ThreadKeeper(cfg.cpu_threads, on_change=lambda step, plan: run.log_event(
        "threads", f"now {plan.threads} CPU thread(s): {plan.why}", step=step)) if device.type == "cpu" else None
    run.write_status(message=f"loading {cfg.dataset}")
    for stale in run.checkpoint_dir.glob(".*.tmp"):  # left by a worker killed while saving; only we write here
        with contextlib.suppress(OSError):
            stale.unlink()

    def loading(message: str) -> None:  # the page shows it from status.json, the CLI prints it
        run.write_status(message=message)
        printer("loading", {"message": message})

    splits = load_splits(cfg, data_dir, device, progress=loading)
    torch.manual_seed(cfg.seed)
    model = RecurrentClassifier(model_config_for(cfg, len(splits.classes))).to(device)
    optimizer = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.momentum)
    scaler = grad_scaler(device, cfg.amp)  # fp16 only; lives in last.pt with the optimizer
    began = choose_start(run, cfg, model, optimizer, splits.classes, resume=how.resume, resume_from=how.resume_from,
                         scaler=scaler)
    mix = DrawingMix.prepare(cfg, data_dir, splits.classes, device, len(splits.train_y))  # None unless asked
    if mix is not None:  # the user's drawings mixed into the training split; held-out accuracy "before"
        splits.train_x, splits.train_y = mix.mixed(splits.train_x, splits.train_y)
        config["my_drawings"] = mix.record(model, cfg, config.get("my_drawings"))
    record_config(run, config, cfg, model, splits, keeper)
    session = TrainingSession(run, cfg, model, optimizer, control, classes=splits.classes, start=began.position,
                              steps_per_epoch=math.ceil(len(splits.train_y) / cfg.batch_size),
                              live=LiveSettings.of(cfg).with_saved(began.live), printer=printer,
                              after_epoch=how.after_epoch, scaler=scaler, handoff=how.handoff)
    return Opened(session, splits, mix, config, keeper, began.note)


def record_config(run: Run, config: dict, cfg: TrainConfig, model: torch.nn.Module, splits: Splits,
                  keeper: ThreadKeeper | None) -> None:
    """What this start found, written into config.json: the device, sizes, threads, classes, resolved settings,
    and for a fine-tune the validation accuracy of the weights it starts from (once: for before -> after)."""
    device = splits.train_x.device
    if cfg.init_from and "start_val_acc" not in config:
        before = evaluate(model, splits.val_x, splits.val_y, num_classes=len(splits.classes),
                          batch_size=eval_batch_size_for(device, cfg.eval_batch_size))
        config["start_val_acc"], config["start_val_per_class"] = before.accuracy, before.per_class
    config.update(device=str(device), device_name=device_name(device), sizes=splits.sizes(),
                  threads={"torch": torch.get_num_threads(), "why": keeper.claims.plan.why} if keeper else None,
                  classes=splits.classes, data_source=splits.source, augment=resolve_augment(cfg.augment, cfg.dataset),
                  amp=cfg.amp, drawn_share=resolve_drawn_share(cfg.drawn_share, cfg.dataset))
    atomic_write_json(run.config_path, config)
