"""Training configuration: one dataclass, validated in one place.

Every entry point (CLI, dashboard form, worker) builds a `TrainConfig` and calls
`validate()`, so a bad value is reported the same way everywhere: one `ConfigError`
(a `ValueError`) that lists every bad field with what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from brnn_core.data.datasets import DATASETS, MNIST_CLASSES, default_dataset
from brnn_core.devices import amp_problem, device_problem
from brnn_core.model import CELLS, INPUT_SCALES, ModelConfig
from brnn_core.schedule import SCHEDULES

DATASET_NAMES = tuple(DATASETS)  # the one list is data.datasets.DATASETS
# "auto" resolves when the config is validated (as epochs=0 does), so config.json records the head used: bidir for a
# two-way net, last for a one-way one, whose state after the last row is the only one that has read the whole image
# (docs/decisions/018-cells-and-directions.md).
AUTO_HEAD = "auto"
HEADS = (AUTO_HEAD, "bidir", "last")
CELL_NAMES = tuple(CELLS)  # lstm, gru, rnn: the one list is model.CELLS
OPTIMIZERS = ("adam", "adamw", "sgd")
# "auto", the default: bf16 where the device runs it natively, else off (devices.resolve_amp;
# docs/decisions/016-amp-auto.md for the mechanics, 022-amp-auto-default.md for the default)
AMP_MODES = ("auto", "off", "bf16", "fp16")
# Training-batch augmentation (brnn_core/data/augment.py holds what each level does). "auto" picks per dataset:
AUGMENT_LEVELS = ("auto", "off", "light", "medium", "strong")
# the level that read digits best on mnist-sample (docs/decisions/001-augmentation.md); kmnist is handwriting too,
# so it gets the digits' level. Clothes photos are not drawn with a pen: off until measured otherwise.
AUGMENT_AUTO = {"mnist": "medium", "mnist-sample": "medium", "kmnist": "medium", "fashion-mnist": "off"}
# epochs=0 ("auto") picks per dataset when the config is validated, so config.json, the live controls, the lr
# schedule, resume and branches all see the number. The offline sample's run lasts long enough on a CPU to try
# the live controls and ends more accurate; the full datasets are twelve times larger, so their few epochs take as
# long (docs/decisions/091-epochs-per-dataset.md).
AUTO_EPOCHS = 0
EPOCHS_AUTO = {"mnist-sample": 20, "mnist": 2, "fashion-mnist": 2, "kmnist": 2}

# Fields that may change while a run trains (sent through the control channel).
# Teach it (training.teach): the drawings' share of each epoch, the epochs and the schedule's peak lr of the
# fine-tune: enough to learn the user's letterforms without forgetting MNIST's (docs/decisions/012-teach-defaults.md).
TEACH_DEFAULTS = {"my_drawings": 0.2, "epochs": 2, "lr": 0.002}
BEST_BY = ("val_loss", "val_accuracy")
LIVE_FIELDS = ("lr", "grad_clip", "epochs", "augment")
# What a run made before a setting existed trained with (its config.json lacks the key): it resumes, and its
# live values read, as it was; the one home of these (the worker's config, the page's live values).
OLDER_RUN_DEFAULTS = {"augment": "off", "lr_schedule": "constant", "input_scale": "unit", "drawn_share": 0.0,
                      "amp": "off", "tensorboard": False, "gradient_flow_every": 0}
# Measure the gradient flow through time every this many steps: rarely enough to cost at most 5 % of the training
# time at the defaults (docs/decisions/020-gradient-flow-every.md).
GRADIENT_FLOW_EVERY = 50
# Fields that change what a run records, not how it trains: runs that differ only in them (and the seed) are one
# seed group, and a sweep does not search them.
RECORDING_FIELDS = ("tensorboard", "gradient_flow_every")


class ConfigError(ValueError):
    """Raised with every bad field at once; `errors` maps field -> message."""

    def __init__(self, errors: dict[str, str]):
        self.errors = dict(errors)
        lines = [f"  {name}: {msg}" for name, msg in self.errors.items()]
        super().__init__("invalid training config:\n" + "\n".join(lines))


@dataclass
class TrainConfig:
    """Everything that defines a training run.

    The blog script's hyperparameters (hidden size, layers, batch size, lr, Adam) are the starting point. Where a
    default differs, it trained better or read drawn digits better here, and its help says how: the lr schedule
    and input scaling (docs/decisions/009-training-recipe.md), the head (006-bidir-head.md), augmentation
    (001-augmentation.md), pen-stroke copies of the training digits (011-drawn-share.md), epochs per dataset
    (091-epochs-per-dataset.md).
    """

    dataset: str = field(default="mnist-sample", metadata={
        "help": "Which 28x28 dataset to train on. mnist-sample (5,000 real MNIST digits) works offline."})
    cell: str = field(default="lstm", metadata={
        "help": "The recurrent cell: lstm (the blog's: gates and a cell state that carries memory), gru (two gates, "
                "no separate cell state, fewer weights) or rnn (Elman's plain tanh cell, no gates). Fixed by a "
                "checkpoint's weights."})
    bidirectional: bool = field(default=True, metadata={
        "help": "true: each layer reads the rows top-down and bottom-up (two-way, the blog's); false: top-down "
                "only (one-way). Fixed by a checkpoint's weights."})
    hidden_size: int = field(default=128, metadata={
        "help": "Hidden units per direction.", "range": (1, 4096)})
    num_layers: int = field(default=2, metadata={
        "help": "Stacked recurrent layers.", "range": (1, 8)})
    dropout: float = field(default=0.0, metadata={
        "help": "Dropout between recurrent layers (needs 2+ layers).", "range": (0.0, 0.9)})
    input_scale: str = field(default="standard", metadata={
        "help": "standard: pixels shifted and scaled to MNIST's mean 0 and spread 1 inside the model (learns "
                "faster); unit: pixels in [0, 1] as the blog fed them. Fixed by a checkpoint's weights."})
    head: str = field(default=AUTO_HEAD, metadata={
        "help": "What the classifier reads. bidir (two-way only): forward state at the last row + backward state "
                "at the first row. last: the state at the last row (one-way: the only one that has read the whole "
                "image; two-way: the blog's out[:, -1, :], whose backward half has seen only the last row). auto: "
                "bidir for a two-way net, last for a one-way one (the run records which)."})
    batch_size: int = field(default=100, metadata={
        "help": "Images per training step.", "range": (1, 65536)})
    epochs: int = field(default=AUTO_EPOCHS, metadata={
        "help": "Passes over the training split; 0 = auto: "
                + ", ".join(f"{v} for {k}" for k, v in EPOCHS_AUTO.items())
                + " (the run records the number). Can be changed while training.", "range": (0, 1000)})
    lr: float = field(default=0.01, metadata={
        "help": "Learning rate: the peak of the schedule (can be changed while training; the rest of the "
                "schedule scales with it).", "range": (1e-7, 10.0)})
    lr_schedule: str = field(default="cosine", metadata={
        "help": "cosine: a short warm-up to the peak lr, then down to 1% of it by the last planned step "
                "(follows live changes of lr and epochs); constant: the peak throughout (the blog's recipe)."})
    optimizer: str = field(default="adam", metadata={
        "help": "adam, adamw, or sgd (with momentum)."})
    momentum: float = field(default=0.9, metadata={
        "help": "SGD momentum (ignored by adam/adamw).", "range": (0.0, 0.999)})
    weight_decay: float = field(default=0.0, metadata={
        "help": "L2 penalty (decoupled for adamw).", "range": (0.0, 1.0)})
    grad_clip: float = field(default=0.0, metadata={
        "help": "Clip the gradient norm to this value; 0 turns clipping off.", "range": (0.0, 1e6)})
    best_by: str = field(default="val_loss", metadata={
        "help": "What picks best.pt: the lowest validation loss (val_loss) or the highest validation accuracy "
                "(val_accuracy; a sweep on that metric sets it)."})
    val_fraction: float = field(default=0.1, metadata={
        "help": "Share of the training set held out for validation.", "range": (0.01, 0.5)})
    seed: int = field(default=0, metadata={
        "help": "Seed for weights and shuffling: same seed, same CPU loss curve.", "range": (0, 2**31 - 1)})
    device: str = field(default="auto", metadata={
        "help": "auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps."})
    log_interval: int = field(default=10, metadata={
        "help": "Log the training loss every N steps (the GPU is synced only then).", "range": (1, 100000)})
    eval_batch_size: int = field(default=250, metadata={
        "help": "Images per evaluation batch. The default was fastest on CPU (larger batches cost page faults: "
                "docs/decisions/003-eval-batch-size.md).", "range": (1, 65536)})
    amp: str = field(default="auto", metadata={
        "help": "Mixed precision: auto (the default) = bf16 where the device runs it natively (a CPU with "
                "AVX512-BF16 or AMX, a CUDA GPU with bf16), about twice as fast on such a CPU and as accurate, "
                "else off; off (fp32, the blog's); bf16; or fp16 (CUDA only). The run records what auto chose and "
                "keeps it when resumed or branched; the classifier layer, the loss and best.pt's validation stay "
                "fp32 (docs/decisions/016-amp-auto.md, 022-amp-auto-default.md)."})
    augment: str = field(default="auto", metadata={
        "help": "Random rotation, scale, slant, shift and stroke thickness per training image (never on validation "
                "or test), so drawn digits are recognised: off, light, medium, strong, or auto = "
                + ", ".join(f"{v} for {k}" for k, v in AUGMENT_AUTO.items()) + ". Can be changed while training."})
    drawn_share: float = field(default=0.3, metadata={
        "help": "Share of the training digits replaced by pen-stroke copies: each redrawn with a round brush at a "
                "random size and slant, then preprocessed as the Predict page's canvas is, so what you draw there "
                "is read better; digit datasets only (mnist, mnist-sample); 0 = off. Not your own drawings (that "
                "is my_drawings). Made once per dataset and cached (<data folder>/cache).", "range": (0.0, 1.0)})
    cpu_threads: int = field(default=0, metadata={
        "help": "CPU threads for training; 0 = every core, shared evenly with other training runs on this machine "
                "and with cores other programs keep busy (re-planned every few seconds while they come and go: "
                "docs/decisions/007-cpu-threads.md).",
        "range": (0, 1024)})
    my_drawings: float = field(default=0.0, metadata={
        "help": "Share of the training images that are your own saved drawings (the Predict page's Teach it, in "
                "<data folder>/my-drawings), each repeated to reach it; 0 = off. The held-out drawings are never "
                "trained on: the report shows accuracy on them before and after.", "range": (0.0, 0.5)})
    gradient_flow_every: int = field(default=GRADIENT_FLOW_EVERY, metadata={
        "help": "Every N steps, measure how strongly the loss reaches back to each row's hidden state (per layer "
                "and direction, on one fixed batch of training images) into the run's gradient_flow.csv, shown live "
                "on the Train page; 0 = off. Changes what is recorded, never what is trained (the default costs a "
                "few % of the training time: docs/decisions/020-gradient-flow-every.md).", "range": (0, 1000000)})
    init_from: str = field(default="", metadata={
        "help": "Checkpoint file to start the weights from (fine-tuning), e.g. runs/<id>/checkpoints/best.pt; "
                "empty = random weights. Cell, direction, hidden size, layers and head must match it."})
    tensorboard: bool = field(default=True, metadata={
        "help": "Also write TensorBoard event files into the run's folder while it trains (tensorboard --logdir "
                "runs shows every run live); false: only the run's own files."})

    # ----------------------------------------------------------------- helpers
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def help_for(cls, name: str) -> str:
        return next(f.metadata.get("help", "") for f in fields(cls) if f.name == name)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, check_device: bool = True) -> TrainConfig:
        """Build and validate from loose values (strings from a form or `--set`)."""
        errors: dict[str, str] = {}
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in data.items():
            if key not in known:
                errors[key] = f"unknown field; known fields are: {', '.join(known)}"
                continue
            try:
                values[key] = _coerce(raw, type(getattr(cls(), key)))
            except (TypeError, ValueError, KeyError):
                kind = type(getattr(cls(), key)).__name__
                errors[key] = f"expected {_KIND_WORDS[kind]}, got {raw!r}"
        cfg = cls(**values)
        errors.update(cfg.errors(check_device=check_device))
        # Type errors first: they explain why a range error may be missing.
        if errors:
            raise ConfigError(errors)
        return cfg

    @classmethod
    def from_file(cls, path: str | Path, *, check_device: bool = True) -> TrainConfig:
        return cls.from_dict(cls.values_in_file(path), check_device=check_device)

    @staticmethod
    def values_in_file(path: str | Path) -> dict[str, Any]:
        """A config file's field: value pairs as written (an auto value stays auto); ConfigError when unreadable."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError({"config": f"file not found: {path}"}) from None
        except IsADirectoryError:
            raise ConfigError({"config": f"{path} is a folder; give a JSON file of field: value"}) from None
        except OSError as exc:
            raise ConfigError({"config": f"cannot read {path} ({exc.strerror or exc}); make it readable"}) from None
        except UnicodeDecodeError as exc:
            raise ConfigError({"config": f"{path} is not UTF-8 text (byte {exc.start}); save it as a UTF-8 JSON "
                                         "file"}) from None
        except json.JSONDecodeError as exc:
            raise ConfigError({"config": f"{path} is not valid JSON ({exc})"}) from None
        except RecursionError:
            raise ConfigError({"config": f"{path} nests too deeply to read; a config is one flat JSON object of "
                                         "field: value"}) from None
        if not isinstance(data, dict):
            raise ConfigError({"config": f"{path} must hold a JSON object of field: value"})
        return data

    def errors(self, *, check_device: bool = True) -> dict[str, str]:
        """Every problem with this config as field -> message (empty when valid)."""
        errs: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            expected = type(getattr(TrainConfig(), f.name))
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
                setattr(self, f.name, value)
            if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
                errs[f.name] = f"expected {_KIND_WORDS[expected.__name__]}, got {value!r}"
                continue
            rng = f.metadata.get("range")
            if rng and not (rng[0] <= value <= rng[1]):  # NaN fails this comparison too
                errs[f.name] = f"{value!r} is out of range; allowed {rng[0]:g} to {rng[1]:g}"
        _choice(errs, self, "dataset", DATASET_NAMES)
        _choice(errs, self, "head", HEADS)
        _choice(errs, self, "cell", CELL_NAMES)
        if "head" not in errs and "bidirectional" not in errs:
            self.head = resolve_head(self.head, self.bidirectional)
            if self.head == "bidir" and not self.bidirectional:
                errs["head"] = ("bidir reads the backward direction, which a one-way net (bidirectional=false) does "
                                "not have: set head=auto or head=last, or bidirectional=true")
        _choice(errs, self, "optimizer", OPTIMIZERS)
        _choice(errs, self, "amp", AMP_MODES)
        _choice(errs, self, "augment", AUGMENT_LEVELS)
        _choice(errs, self, "lr_schedule", SCHEDULES)
        _choice(errs, self, "input_scale", INPUT_SCALES)
        _choice(errs, self, "best_by", BEST_BY)
        if "epochs" not in errs and "dataset" not in errs:
            self.epochs = resolve_epochs(self.epochs, self.dataset)
        if "init_from" not in errs and self.init_from and not Path(self.init_from).expanduser().is_file():
            errs["init_from"] = f"no checkpoint file {self.init_from!r}; give the path of a .pt file or leave it empty"
        if "device" not in errs:
            msg = device_problem(self.device, check_available=check_device)
            if msg:
                errs["device"] = msg
        if "amp" not in errs and "device" not in errs:
            msg = amp_problem(self.amp, self.device, check_available=check_device)
            if msg:
                errs["amp"] = msg
        return errs

    def validate(self, *, check_device: bool = True) -> TrainConfig:
        errs = self.errors(check_device=check_device)
        if errs:
            raise ConfigError(errs)
        return self


_KIND_WORDS = {"int": "a whole number", "float": "a number", "str": "text",
               "bool": "true or false (also yes/no or 1/0)"}
BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def _coerce(raw: Any, kind: type) -> Any:
    """Turn a form/CLI value into the field's type; refuses lossy conversions."""
    if isinstance(raw, kind) and not isinstance(raw, bool):
        return raw
    if kind is bool:
        if isinstance(raw, int | float) and raw in (0, 1):  # a JSON 1/0
            return bool(raw)
        return BOOL_WORDS[str(raw).strip().lower()]  # KeyError (a LookupError): not a yes or no
    if isinstance(raw, bool):
        raise TypeError("booleans are not numbers")
    if kind is int:
        if isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError(raw)
            return int(raw)
        text = str(raw).strip()
        try:
            return int(text)
        except ValueError:
            as_float = float(text)  # accepts "1e3"
            if not as_float.is_integer():
                raise
            return int(as_float)
    if kind is float:
        return float(str(raw).strip()) if not isinstance(raw, int) else float(raw)
    return str(raw).strip()


def _choice(errs: dict, cfg: TrainConfig, name: str, allowed: tuple[str, ...]) -> None:
    if name not in errs and getattr(cfg, name) not in allowed:
        errs[name] = f"{getattr(cfg, name)!r} is not one of: {', '.join(allowed)}"


def resolve_augment(level: str, dataset: str) -> str:
    """The augmentation level a run uses: `level` itself, or for "auto" the measured choice for `dataset`."""
    return AUGMENT_AUTO.get(dataset, "off") if level == "auto" else level


def architecture(train: dict) -> dict[str, Any]:
    """The cell and direction of a run from its config.json's training values: a run made before either existed
    trained what a checkpoint without them is (ModelConfig's defaults: a two-way LSTM). None for a run without
    training values (a damaged config.json)."""
    if not train:
        return {"cell": None, "bidirectional": None}
    return {"cell": train.get("cell", ModelConfig.cell), "bidirectional": train.get("bidirectional",
                                                                                    ModelConfig.bidirectional)}


def resolve_head(head: str, bidirectional: bool) -> str:
    """The head a run uses: `head` itself, or for "auto" bidir (two-way) or last (one-way)."""
    return ("bidir" if bidirectional else "last") if head == AUTO_HEAD else head


def resolve_epochs(epochs: int, dataset: str) -> int:
    """The epochs a run trains: `epochs` itself, or for 0 ("auto") the choice for `dataset`."""
    return EPOCHS_AUTO.get(dataset, 2) if epochs == AUTO_EPOCHS else epochs


# Why a live `epochs` of 0 is refused (the worker's check and the senders' alike)
LIVE_AUTO_EPOCHS = "0 (auto) is for a new run; give the total number of epochs, at least 1"


def asks_auto_epochs(value: Any) -> bool:
    """Whether a raw epochs value (form, `--set`, control command) is 0 = auto: a run in training needs a number."""
    try:
        return _coerce(value, int) == AUTO_EPOCHS
    except (TypeError, ValueError):
        return False


def epochs_auto_label(dataset: str) -> str:
    """What 0 means for `dataset`, for a form's label: "0 = auto: 20 for this dataset"."""
    return f"0 = auto: {resolve_epochs(AUTO_EPOCHS, dataset)} for this dataset"


def resolve_drawn_share(share: float, dataset: str) -> float:
    """The share of training images a run redraws as canvas strokes: `share` for digit datasets, else 0."""
    info = DATASETS.get(dataset)
    return share if info is not None and list(info.classes) == MNIST_CLASSES else 0.0


def parse_set(pairs: list[str]) -> dict[str, str]:
    """Parse `--set key=value` pairs; a pair without '=' is reported as a config error."""
    out: dict[str, str] = {}
    bad: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            bad[pair] = "expected key=value, as in --set lr=0.001"
        else:
            out[key] = value
    if bad:
        raise ConfigError(bad)
    return out


def train_values(config_file: str | Path | None, sets: list[str], data_dir: Path) -> dict[str, Any]:
    """`--config FILE`, then `--set KEY=VALUE` pairs on top, as typed: what `load_train_config` validates. The file
    alone must be valid; its auto values stay auto, so `--set bidirectional=false` gets the one-way head."""
    values: dict = {}
    if config_file:
        values.update(TrainConfig.values_in_file(config_file))
        TrainConfig.from_dict(values, check_device=False)  # its own errors, named as the file's
    overrides = parse_set(sets)
    if "dataset" not in values and "dataset" not in overrides:
        values["dataset"] = default_dataset(data_dir)
    values.update(overrides)
    return values


def load_train_config(config_file: str | Path | None, sets: list[str], data_dir: Path, *,
                      check_device: bool = True) -> TrainConfig:
    """`--config FILE`, then `--set KEY=VALUE` pairs on top, as `train` and `sweep` read them; the dataset
    defaults to full MNIST when it is on disk in `data_dir`, else the offline sample."""
    return TrainConfig.from_dict(train_values(config_file, sets, data_dir), check_device=check_device)
