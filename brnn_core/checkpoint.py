"""Self-describing checkpoints, loaded safely.

A checkpoint is a plain dict of tensors, numbers and strings, so `torch.load(...,
weights_only=True)` can read it and no pickled code ever runs. It carries the model
config, so the model is rebuilt from the file alone. A bare state_dict (the blog's
`model.ckpt`) loads too: its architecture is read off the tensor shapes.
"""

from __future__ import annotations

import io
import pickle
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from brnn_core.config import TrainConfig
from brnn_core.fileio import atomic_write
from brnn_core.model import CELLS, GATE_BLOCKS, ModelConfig, RecurrentClassifier

FORMAT = "brnn-checkpoint"
FORMAT_VERSION = 1
# What a header may ask for: TrainConfig's own ranges, and the 28-pixel rows every dataset here has. A header
# past them is damaged or hostile, and a model built from it could take more memory than the machine has.
HEADER_LIMITS = {"input_size": (28, 28), "num_classes": (1, 1000),
                 **{key: next(f.metadata["range"] for f in fields(TrainConfig) if f.name == key)
                    for key in ("hidden_size", "num_layers")}}


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says what is wrong and what would fix it."""


@dataclass
class Checkpoint:
    model_config: ModelConfig
    model_state: dict[str, torch.Tensor]
    classes: list[str]
    train_config: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0  # completed epochs
    step: int = 0  # optimizer steps taken
    batch_in_epoch: int = 0  # batches done in the unfinished epoch (mid-epoch resume)
    metrics: dict[str, float] = field(default_factory=dict)
    optimizer_state: dict | None = None
    scaler_state: dict | None = None  # fp16 loss scaling (GradScaler.state_dict) in last.pt
    bare: bool = False  # loaded from a bare state_dict
    calibration: dict = field(default_factory=dict)  # added with the test report (brnn_core.inference.calibration)

    def build_model(self, device: torch.device | str = "cpu") -> RecurrentClassifier:
        model = RecurrentClassifier(self.model_config)
        check_state_matches(model.state_dict(), self.model_state)
        model.load_state_dict(self.model_state)
        return model.to(device)


def save_checkpoint(path: Path, model: RecurrentClassifier, *, classes: list[str], train_config: dict | None = None,
                    epoch: int = 0, step: int = 0, batch_in_epoch: int = 0,
                    metrics: dict | None = None, optimizer: torch.optim.Optimizer | None = None,
                    scaler: torch.amp.GradScaler | None = None) -> None:
    """Write atomically: a crash mid-save leaves the previous file intact."""
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_config": model.cfg.to_dict(),
        "model_state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "classes": list(classes),
        "train_config": dict(train_config or {}),
        "epoch": int(epoch),
        "step": int(step),
        "batch_in_epoch": int(batch_in_epoch),
        "metrics": {k: float(v) for k, v in (metrics or {}).items()},
        "torch_version": str(torch.__version__),
    }
    if optimizer is not None:
        payload["optimizer_state"] = optimizer.state_dict()
    if scaler is not None and scaler.is_enabled():
        payload["scaler_state"] = scaler.state_dict()  # the scale a resumed fp16 run continues from
    buf = io.BytesIO()
    torch.save(payload, buf)
    atomic_write(Path(path), lambda fh: fh.write(buf.getbuffer()))


def store_calibration(path: Path, calibration: dict) -> None:
    """Add (or replace) a checkpoint file's "calibration" entry, keeping everything else as it is; atomic."""
    obj = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} file; a calibration is only stored in the dashboard's own")
    obj["calibration"] = calibration
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write(Path(path), lambda fh: fh.write(buf.getbuffer()))


def load_checkpoint(source: Path | str | bytes) -> Checkpoint:
    """Read a checkpoint file (or its bytes) without unpickling anything but plain data."""
    name = "uploaded file" if isinstance(source, bytes) else str(source)
    if isinstance(source, bytes):
        data = source
    else:
        try:
            data = Path(source).read_bytes()
        except FileNotFoundError:
            raise CheckpointError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise CheckpointError(f"{name}: is a folder, not a checkpoint file") from None
        except OSError as exc:
            raise CheckpointError(f"{name}: cannot read ({exc.strerror})") from None
    if not data:
        raise CheckpointError(f"{name}: the file is empty (0 bytes); it is not a checkpoint")
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # The weights-only unpickler says "Weights only load failed" for any bad byte; only these
        # reasons mean the file really carries code (a global or a call to run while loading).
        if re.search(r"GLOBAL|allowlisted|call reduce", str(exc)):
            found = re.search(r"(GLOBAL|global) ([\w.]+)", str(exc))
            what = f" ({found.group(2)})" if found else ""
            raise CheckpointError(
                f"{name}: refused, it holds Python objects{what} that could run code when loaded. "
                "Only tensors and plain data are accepted; re-save the checkpoint as a state_dict.") from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(exc))
        raise CheckpointError(f"{name}: not a PyTorch checkpoint "
                              f"({detail.group(1).strip() if detail else _short(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - on a foreign or damaged file the unpickler raises nearly anything
        raise CheckpointError(f"{name}: not a readable PyTorch checkpoint, the file is truncated or "
                              f"of another kind ({_short(exc)})") from None
    return _interpret(obj, name)


def _short(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def _interpret(obj: Any, name: str) -> Checkpoint:
    if not isinstance(obj, dict):
        raise CheckpointError(f"{name}: holds a {type(obj).__name__}, expected a checkpoint dict or state_dict")
    if obj.get("format") == FORMAT:
        try:
            mcfg = ModelConfig(**obj["model_config"])
            ckpt = Checkpoint(
                model_config=mcfg, model_state=dict(obj["model_state"]), classes=list(obj["classes"]),
                train_config=dict(obj.get("train_config", {})), epoch=int(obj.get("epoch", 0)),
                step=int(obj.get("step", 0)), batch_in_epoch=int(obj.get("batch_in_epoch", 0)),
                metrics=dict(obj.get("metrics", {})), optimizer_state=obj.get("optimizer_state"),
                scaler_state=obj.get("scaler_state"),
                calibration=obj["calibration"] if isinstance(obj.get("calibration"), dict) else {})
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{name}: a {FORMAT} file with a damaged header ({exc})") from None
        problem = _header_problem(ckpt)
        if problem:
            raise CheckpointError(f"{name}: a {FORMAT} file with a damaged header ({problem})")
        try:  # a header that lies about the architecture is refused here, before any model is built from it
            check_state_matches(expected_state(ckpt.model_config), ckpt.model_state)
        except CheckpointError as exc:
            raise CheckpointError(f"{name}: the header's model_config does not fit its tensors: {exc}") from None
        check_finite(ckpt.model_state, name)
        return ckpt
    state = obj.get("state_dict", obj.get("model_state_dict", obj))
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{name}: a dict without model weights; expected a state_dict of this project's model "
                              "or the blog's BiLSTM (keys lstm.weight_ih_l0 ... fc.bias)")
    state = {k.removeprefix("module."): v for k, v in state.items()}
    mcfg = infer_model_config(state, name)
    check_state_matches(expected_state(mcfg), state)  # e.g. a later layer of another width
    check_finite(state, name)
    return Checkpoint(model_config=mcfg, model_state=state, classes=[str(i) for i in range(mcfg.num_classes)],
                      bare=True)


def check_finite(state: dict[str, torch.Tensor], name: str) -> None:
    """Refuse weights that hold NaN or infinity: such a model answers every input with the same class (or NaN),
    so evaluating, predicting, fine-tuning or resuming from it only looks like it worked."""
    bad = [key for key, value in state.items() if value.is_floating_point() and not torch.isfinite(value).all()]
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise CheckpointError(
            f"{name}: refused, its weights hold NaN or infinite values ({shown}), so it cannot classify anything "
            "(most likely saved after its training diverged). Use a checkpoint from before (a run's best.pt, or "
            "the last.pt a diverged run keeps), or train again with a lower learning rate or gradient clipping")


def _header_problem(ckpt: Checkpoint) -> str | None:
    """What makes a self-describing checkpoint's header unusable (it would crash building the model)."""
    cfg = ckpt.model_config
    for key in ("input_size", "hidden_size", "num_layers", "num_classes"):
        value = getattr(cfg, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"model_config.{key} is {value!r}, expected a whole number of at least 1"
        low, high = HEADER_LIMITS[key]
        if not low <= value <= high:
            return f"model_config.{key} is {value}, expected {low} to {high}" + (
                "; this dashboard feeds rows of 28 pixels" if key == "input_size" else "")
    if not isinstance(cfg.dropout, int | float) or not 0.0 <= cfg.dropout < 1.0:
        return f"model_config.dropout is {cfg.dropout!r}, expected a number from 0 to below 1"
    if cfg.cell not in CELLS:
        return f"model_config.cell is {cfg.cell!r}, expected one of {', '.join(CELLS)}"
    if not isinstance(cfg.bidirectional, bool):
        return f"model_config.bidirectional is {cfg.bidirectional!r}, expected true or false"
    if cfg.head not in ("bidir", "last"):
        return f"model_config.head is {cfg.head!r}, expected bidir or last"
    if cfg.head == "bidir" and not cfg.bidirectional:
        return "model_config.head is bidir for a one-way model, which has no backward direction to read"
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in ckpt.model_state.items()):
        return "model_state is not a mapping of layer names to tensors"
    if len(ckpt.classes) != cfg.num_classes:
        return f"{len(ckpt.classes)} class names for a model with {cfg.num_classes} outputs"
    return None


def expected_state(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The tensors a model of `cfg` has, on the meta device: their shapes, without allocating their memory."""
    with torch.device("meta"):
        return RecurrentClassifier(cfg).state_dict()


def infer_model_config(state: dict[str, torch.Tensor], name: str = "state_dict") -> ModelConfig:
    """Read the cell, directions, hidden size, layers and classes off a bare state_dict's names and shapes."""
    cell = next((c for c in CELLS if f"{c}.weight_ih_l0" in state), None)
    if cell is None or f"{cell}.weight_hh_l0" not in state or "fc.weight" not in state:
        missing = [k for k in ("lstm.weight_ih_l0", "lstm.weight_hh_l0", "fc.weight") if k not in state]
        raise CheckpointError(f"{name}: missing {missing[0] if cell is None else 'fc.weight'}; this is not a "
                              "state_dict of the blog's BiLSTM or of this project's LSTM, GRU or RNN "
                              f"(found keys: {', '.join(list(state)[:6])}...)")
    hidden = state[f"{cell}.weight_hh_l0"].shape[1]
    blocks, input_size = state[f"{cell}.weight_ih_l0"].shape
    layers = len([k for k in state if re.fullmatch(rf"{cell}\.weight_ih_l\d+", k)])
    bidirectional = f"{cell}.weight_ih_l0_reverse" in state
    num_classes, fc_in = state["fc.weight"].shape
    if blocks != GATE_BLOCKS[cell] * hidden:
        article = "a" if cell == "gru" else "an"
        raise CheckpointError(f"{name}: {cell}.weight_ih_l0 has {blocks} rows; {article} {cell.upper()} of hidden size "
                              f"{hidden} has {GATE_BLOCKS[cell] * hidden}")
    if input_size != 28:
        raise CheckpointError(f"{name}: the {cell.upper()} reads rows of {input_size} pixels; this dashboard feeds 28")
    directions = 2 if bidirectional else 1
    if fc_in != directions * hidden:
        raise CheckpointError(f"{name}: fc.weight takes {fc_in} inputs but the {cell.upper()} gives "
                              f"{directions * hidden}")
    # A bare two-way LSTM comes from the blog's script, whose head is out[:, -1, :]; a one-way net reads its last
    # row's state too: "last" is the only head both have in common.
    return ModelConfig(input_size=28, hidden_size=hidden, num_layers=layers, num_classes=num_classes, head="last",
                       cell=cell, bidirectional=bidirectional)


def check_state_matches(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor]) -> None:
    """Raise a CheckpointError naming each missing, extra or mis-shaped tensor."""
    problems = []
    # The classifier first: a different class count is the likeliest reason and the most useful line.
    for key in sorted(expected, key=lambda k: not k.startswith("fc.")):
        if key not in found:
            problems.append(f"missing layer {key} (expected shape {tuple(expected[key].shape)})")
        elif tuple(found[key].shape) != tuple(expected[key].shape):
            problems.append(f"layer {key}: expected shape {tuple(expected[key].shape)}, "
                            f"found {tuple(found[key].shape)}")
    problems += [f"unexpected layer {key} {tuple(found[key].shape)}" for key in found if key not in expected]
    if problems:
        shown = problems[:12] + ([f"... and {len(problems) - 12} more"] if len(problems) > 12 else [])
        raise CheckpointError("checkpoint does not fit the model: " + "; ".join(shown))
