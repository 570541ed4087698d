"""A checkpoint as a file other runtimes run: ONNX (ONNX Runtime, no PyTorch) or TorchScript (`torch.jit.load`).

The exported model takes (N, 28, 28) float images in [0, 1] (white on black, as MNIST) and returns (N, classes)
probabilities: the checkpoint's own network with its input scaling inside (`input_scale`) and its calibration
temperature (T = 1 when it has none), so it gives the probabilities the Predict page shows for the same image.
The batch size is free. Before a file is kept it is run in its own runtime on real digits (the offline sample's
test digits, another batch size than the one it was traced with) and must give the checkpoint's probabilities
within TOLERANCE; the file is written beside `--out` under a temporary name and renamed only then, so a failed
export never replaces anything. ONNX uses PyTorch's TorchScript-based exporter (`dynamo=False`): the newer
exporter fails on bidirectional LSTMs or fixes their sequence length (pytorch issues 126339, 191855); it goes
through the model's own forward, so every cell and direction a checkpoint holds exports the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from brnn_core import __version__
from brnn_core.checkpoint import Checkpoint, load_checkpoint
from brnn_core.inference.calibration import Calibration
from brnn_core.model import mode

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}  # format -> the usual file suffix
TOLERANCE = 1e-4  # largest difference in any probability between the file and the checkpoint
TRACE_BATCH = 2  # the example batch the file is traced with; it is checked on CHECK_DIGITS, another size
CHECK_DIGITS = 500
OPSET = 17
INPUT_NAME, OUTPUT_NAME = "images", "probabilities"
INSTALL = "pip install 'brnn-dashboard[interop]' (or: pip install onnx==1.23.2 onnxruntime==1.32.0)"


class ExportError(ValueError):
    """An export that cannot start (format, --out, a missing package); the message says what to change."""


class ExportMismatch(RuntimeError):
    """The exported file does not give the checkpoint's probabilities; nothing was kept."""


class Probabilities(nn.Module):
    """(N, 28, 28) images in [0, 1] -> (N, classes) calibrated probabilities: what an exported file computes."""

    def __init__(self, model: nn.Module, temperature: float):
        super().__init__()
        self.model, self.temperature = model, float(temperature)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (self.model(images) / self.temperature).softmax(dim=-1)  # (N, C)


@dataclass(frozen=True)
class Exported:
    path: Path
    format: str
    checked: int  # digits the file was run on
    max_difference: float  # the largest |file - checkpoint| over their probabilities


def temperature_of(ckpt: Checkpoint) -> float:
    """The calibration temperature the Predictor uses, 1 when the checkpoint has none."""
    calibration = Calibration.from_dict(ckpt.calibration, ckpt.model_config.hidden_size)
    return calibration.temperature if calibration is not None else 1.0


def check_digits() -> torch.Tensor:
    """(CHECK_DIGITS, 28, 28) float digits in [0, 1]: the offline sample's test split (mnist-sample)."""
    from brnn_core.data.loading import load_dataset

    return load_dataset("mnist-sample").test_x[:CHECK_DIGITS].float() / 255.0


def open_out(out: Path, checkpoint: Path, *, force: bool) -> Path:
    """Check that `out` can be written, before anything is exported: a temporary file beside it (renamed over
    it once the export is checked), or ExportError saying what to change."""
    out = Path(out)
    if out.is_dir():
        raise ExportError(f"--out {out} is a folder; give a file name, e.g. {out / 'model.onnx'}")
    if out.exists() and Path(checkpoint).exists() and out.resolve() == Path(checkpoint).resolve():
        raise ExportError(f"--out {out} is the checkpoint itself; give another file name")
    if (out.exists() or out.is_symlink()) and not force:
        raise ExportError(f"--out {out} already exists; give another file name, or add --force to replace it")
    if out.parent.exists() and not out.parent.is_dir():
        raise ExportError(f"--out {out}: {out.parent} is a file, not a folder; choose a file in a folder")
    if not out.parent.is_dir():
        raise ExportError(f"--out {out}: the folder {out.parent} does not exist; create it or choose another")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as exc:
        raise ExportError(f"--out {out}: cannot write in {out.parent} ({exc.strerror or exc}); choose a folder "
                          "you can write to") from None
    os.close(fd)
    return Path(tmp)


def export_model(checkpoint: Path | str, fmt: str, out: Path | str, *, force: bool = False,
                 digits: torch.Tensor | None = None) -> Exported:
    """Export `checkpoint` as `fmt` to `out`, checked on `digits` (default: check_digits()) before it is kept.

    Raises CheckpointError (an unreadable checkpoint or one of another shape), ExportError (before anything is
    written) or ExportMismatch (the check failed; nothing kept)."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "onnx":
        require_onnx()
    ckpt = load_checkpoint(checkpoint)
    tmp = open_out(Path(out), Path(checkpoint), force=force)
    try:
        model = Probabilities(ckpt.build_model("cpu"), temperature_of(ckpt))
        images = check_digits() if digits is None else digits
        with mode(model, False), torch.inference_mode():
            expected = model(images).numpy()
        with mode(model, False):
            (write_onnx if fmt == "onnx" else write_torchscript)(model, ckpt, tmp)
        got = (run_onnx if fmt == "onnx" else run_torchscript)(tmp, images.numpy())
        difference = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
        if not difference <= TOLERANCE:
            raise ExportMismatch(f"the exported {fmt} file gives probabilities up to {difference:.2g} away from the "
                                 f"checkpoint's on {len(images)} digits (allowed {TOLERANCE:g}); nothing was "
                                 "written. Please report this with the checkpoint.")
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return Exported(Path(out), fmt, len(images), difference)


def metadata(ckpt: Checkpoint, model: Probabilities) -> dict[str, str]:
    """What a user of the file needs besides the weights: the class names and the input it expects."""
    return {"classes": json.dumps(list(ckpt.classes)), "input": "(N, 28, 28) float32 in [0, 1], white on black",
            "output": "(N, classes) probabilities", "input_scale": ckpt.model_config.input_scale,
            "temperature": f"{model.temperature:g}", "producer": f"brnn_core {__version__}"}


@contextlib.contextmanager
def _quiet_tracing():
    """The tracer's advice (LSTM batch sizes) and torch.jit's deprecation notes do not apply: every file is run
    on another batch size and checked against the checkpoint before it is kept, on this pinned torch."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, message=".*batch_size other than 1.*")
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*torch.jit.*")
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*legacy TorchScript-based ONNX.*")
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)  # nn.LSTM's shape checks, traced
        yield


def write_onnx(model: Probabilities, ckpt: Checkpoint, path: Path) -> None:
    import onnx

    example = torch.rand(TRACE_BATCH, 28, 28)
    with _quiet_tracing():
        torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=OPSET,
                          input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                          dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})
    proto = onnx.load(str(path))
    for key, value in metadata(ckpt, model).items():
        proto.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


def run_onnx(path: Path, images: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([OUTPUT_NAME], {INPUT_NAME: images.astype(np.float32)})[0]


def write_torchscript(model: Probabilities, ckpt: Checkpoint, path: Path) -> None:
    with _quiet_tracing():
        traced = torch.jit.trace(model, torch.rand(TRACE_BATCH, 28, 28))
        torch.jit.save(traced, str(path), _extra_files={"metadata.json": json.dumps(metadata(ckpt, model))})


def run_torchscript(path: Path, images: np.ndarray) -> np.ndarray:
    with _quiet_tracing():
        loaded = torch.jit.load(str(path), map_location="cpu")
    with torch.inference_mode():
        return loaded(torch.from_numpy(images)).numpy()


def require_onnx() -> None:
    """ExportError naming the install command when onnx or onnxruntime is missing."""
    missing = [name for name in ("onnx", "onnxruntime") if not _importable(name)]
    if missing:
        raise ExportError(f"--format onnx needs {' and '.join(missing)}, not installed here: {INSTALL}")


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True
