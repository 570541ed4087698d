"""Teach it: a short fine-tune of a checkpoint on the user's saved drawings, in one click or one command.

`teach_config` turns a checkpoint into the TrainConfig of that fine-tune: the checkpoint's own
architecture, dataset, seed and validation share (so validation uses the images it never trained on),
its weights as the start (`init_from`), the drawings mixed in (`my_drawings`) and the measured
defaults below for how long and how fast. The run that follows is an ordinary run: it reports the
held-out drawings' accuracy and the dataset's validation accuracy before -> after, so a teach that
makes the model worse at what it knew shows it.
"""

from __future__ import annotations

from pathlib import Path

from brnn_core.checkpoint import CheckpointError, load_checkpoint
from brnn_core.config import OLDER_RUN_DEFAULTS, TEACH_DEFAULTS, TrainConfig
from brnn_core.data.datasets import DATASETS, default_dataset
from brnn_core.data.drawings import MIN_FOR_ACCURACY, as_tensors, drawings_dir, list_drawings
from brnn_core.devices import amp_problem, device_problem

MIN_TO_TEACH = MIN_FOR_ACCURACY  # saved drawings of the checkpoint's classes before Teach it is offered
INHERITED = ("hidden_size", "num_layers", "head", "dropout", "batch_size", "optimizer", "momentum", "weight_decay",
             "grad_clip", "seed", "val_fraction", "augment", "drawn_share", "lr_schedule", "amp", "device")


class TeachError(ValueError):
    """Teaching cannot start; the message says what to do (save more drawings, pick another checkpoint)."""


def drawings_to_teach(checkpoint_classes: list[str], data_dir: Path) -> tuple[int, int]:
    """(drawings to train on, held-out drawings) saved for these classes."""
    listing = list_drawings(data_dir, checkpoint_classes)
    return len(as_tensors(listing, held_out=False)[1]), len(as_tensors(listing, held_out=True)[1])


def teach_config(checkpoint: Path | str, data_dir: Path, **overrides) -> TrainConfig:
    """The fine-tune of `checkpoint` on the saved drawings; `overrides` (share, epochs, lr...) on top."""
    path = Path(checkpoint).expanduser().resolve()
    ckpt = load_checkpoint(path)
    train, held = drawings_to_teach(list(ckpt.classes), data_dir)
    if train + held < MIN_TO_TEACH or not train:
        raise TeachError(f"{train + held} drawings saved for {', '.join(ckpt.classes)} in {drawings_dir(data_dir)}; "
                         f"save at least {MIN_TO_TEACH} (on the Predict page: draw, then click the true label)")
    saved = {**ckpt.train_config, **ckpt.train_config.get("live", {})}
    dataset = saved.get("dataset") if saved.get("dataset") in DATASETS else default_dataset(data_dir)
    mc = ckpt.model_config
    values = {k: saved[k] for k in INHERITED if k in saved}
    values["amp"] = teach_amp(saved)
    values.update(cell=mc.cell, bidirectional=mc.bidirectional, hidden_size=mc.hidden_size, num_layers=mc.num_layers,
                  head=mc.head, input_scale=mc.input_scale, dataset=dataset,
                  init_from=str(path), **TEACH_DEFAULTS)
    values.update(overrides)
    if len(DATASETS[values["dataset"]].classes) != mc.num_classes:
        raise CheckpointError(f"{path} predicts {mc.num_classes} classes but {values['dataset']} has "
                              f"{len(DATASETS[values['dataset']].classes)}: teach a checkpoint of that dataset")
    return TrainConfig.from_dict(values)


def teach_amp(saved: dict) -> str:
    """The fine-tune's precision: the one the checkpoint trained in (fp32 for one from before the setting), or
    auto where this machine cannot run it (a bf16 checkpoint brought to a CPU without native bf16)."""
    amp = str(saved.get("amp") or OLDER_RUN_DEFAULTS["amp"])
    device = str(saved.get("device") or "auto")
    if not device_problem(device) and amp_problem(amp, device):
        return "auto"
    return amp
