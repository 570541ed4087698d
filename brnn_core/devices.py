"""Which devices and precisions this machine can train on: checks with messages, and the choice of device.

Kept apart from `config`, which calls these checks to validate a TrainConfig: the config is about the
values a user chose, this module about what torch finds on this machine (CUDA GPUs, Apple's MPS, the
CPU's bf16 support).
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch

from brnn_core.text import plural

# torch then answers is_available() and device_count() from NVML, without creating a CUDA context (a server
# that only lists GPUs must leave their memory to the workers, and stay safe to fork).
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


class DeviceError(ValueError):
    """A device that cannot be used here; the message says which to use instead."""


def device_problem(spec: str, *, check_available: bool = True) -> str | None:
    """Why `spec` cannot be used as a device here, or None if it can."""
    spec = spec.strip().lower()
    if spec in ("auto", "cpu"):
        return None
    if spec == "mps":
        if check_available and not mps_available():
            return "mps (Apple GPU) is not available on this machine; use auto or cpu"
        return None
    if spec == "cuda" or spec.startswith("cuda:"):
        sep, index = spec.partition(":")[1:]
        if sep and not index.isdigit():
            return f"{spec!r}: the GPU index must be a number, as in cuda:0 (or plain cuda for the first GPU)"
        if check_available:
            if not torch.cuda.is_available():
                return "CUDA is not available on this machine (no NVIDIA GPU or driver); use auto or cpu"
            count = torch.cuda.device_count()
            if index and int(index) >= count:
                return f"{spec!r}: this machine has {plural(count, 'GPU')}, cuda:0 to cuda:{count - 1}"
        return None
    return f"{spec!r} is not a device; use auto, cpu, cuda, cuda:N or mps"


def mps_available() -> bool:
    """True on a Mac whose torch build can use the Apple GPU."""
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def use_nvml_cuda_check() -> None:
    """Make torch's CUDA availability checks in this process (and the processes it starts) read NVML."""
    os.environ.setdefault(NVML_CHECK, "1")


def device_choices() -> dict[str, str]:
    """Every device this machine offers, as spec -> label (the dashboard's picker, the GPU bench).

    Never creates a CUDA context: the count comes from NVML, the names from pynvml where it is installed."""
    use_nvml_cuda_check()
    options = {"auto": "auto (GPU if there is one)", "cpu": "cpu"}
    for i in range(torch.cuda.device_count()):
        options[f"cuda:{i}"] = f"cuda:{i}: {nvml_gpu_label(i)}"
    if mps_available():
        options["mps"] = "mps (Apple GPU)"
    return options


def nvml_gpu_label(index: int) -> str:
    """"<name>, <memory> GiB" of visible GPU `index` from NVML (pynvml), or a plain label without pynvml."""
    try:
        import pynvml  # optional (nvidia-ml-py): not a dependency
    except ImportError:
        return "NVIDIA GPU"
    try:
        pynvml.nvmlInit()
        with contextlib.suppress(Exception):  # a private helper: where it changed, assume no CUDA_VISIBLE_DEVICES
            index = torch.cuda._get_nvml_device_index(index)
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
    except Exception:  # noqa: BLE001 - a label is not worth failing the page over
        return "NVIDIA GPU"
    name = name.decode() if isinstance(name, bytes) else name
    return f"{name}, {total / 2**30:.0f} GiB"


def amp_problem(amp: str, device_spec: str, *, check_available: bool = True) -> str | None:
    """Why mixed precision `amp` cannot run on `device_spec` here, or None if it can."""
    device = str(device_spec).strip().lower()
    if amp == "fp16":
        if not device.startswith(("cuda", "auto")):
            return "fp16 needs a CUDA device; use bf16 or off on CPU"
        if device == "auto" and check_available and resolve_device("auto").type != "cuda":
            return "fp16 needs a CUDA device and this machine has none (auto means the CPU); use bf16 or off"
    if amp == "bf16" and check_available and resolve_device(device).type == "cpu" and not cpu_has_bf16():
        return ("bf16 on the CPU needs native bf16 instructions (AVX512-BF16 or AMX), which this CPU lacks: "
                "oneDNN's LSTM refuses it; use off")
    return None


def cpu_has_bf16() -> bool:
    """True when oneDNN can run bf16 kernels on this CPU (its LSTM has no fallback without them)."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_amp(amp: str, device: torch.device) -> str:
    """The precision a run trains in: `amp` itself, or for "auto" bf16 where `device` runs it natively, else off.

    On CUDA, "auto" is what the LSTM really runs in under bf16 autocast (cuDNN's RNN may cast to fp16; then
    fp16, whose loss scaling the engine adds). MPS stays off until measured (docs/decisions/016-amp-auto.md)."""
    if amp != "auto":
        return amp
    if device.type == "cpu":
        return "bf16" if cpu_has_bf16() else "off"
    if device.type == "cuda":
        return cuda_lstm_amp(device)
    return "off"


def run_amp(requested: str, recorded: object, device: torch.device) -> str:
    """The precision a run trains in: for amp=auto what it recorded when it first started (`recorded`, its
    config.json's top-level "amp"), so a resumed run keeps it; else `resolve_amp`."""
    if requested == "auto" and recorded in ("off", "bf16", "fp16"):
        return str(recorded)
    return resolve_amp(requested, device)


def eval_amp(trained: object, device: torch.device) -> str:
    """The precision to evaluate a run's checkpoint in on `device`: the one it trained in (config.json's "amp")
    where `device` runs it natively, else fp32 ("off"), so a report made later matches the run's own test score."""
    if trained == "bf16" and ((device.type == "cpu" and cpu_has_bf16())
                              or (device.type == "cuda" and torch.cuda.is_bf16_supported())):
        return "bf16"
    if trained == "fp16" and device.type == "cuda":
        return "fp16"
    return "off"


@functools.cache  # the probe runs kernels; a GPU answers the same for the process's life
def cuda_lstm_amp(device: torch.device) -> str:
    """"bf16" or "fp16": the dtype an LSTM's output has under bf16 autocast on `device`; "off" without bf16."""
    if not torch.cuda.is_bf16_supported():
        return "off"
    from brnn_core.autocast_probe import lstm_autocast_dtype  # runs kernels: only where a CUDA run asks

    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(lstm_autocast_dtype(device, torch.bfloat16), "off")


def amp_auto_label(device_spec: str) -> str:
    """What amp=auto means for `device_spec` here, for the form: "auto: bf16 on this CPU".

    A GPU is named without being touched (the dashboard's server creates no CUDA context): its run decides."""
    try:
        kind = resolve_device(device_spec).type
    except DeviceError:  # the device field says what is wrong with it
        return "auto: bf16 where the device runs it natively, else off"
    if kind == "cpu":
        return "auto: bf16 on this CPU" if cpu_has_bf16() else "auto: off (fp32) on this CPU, which lacks native bf16"
    if kind == "cuda":
        return "auto: bf16 where the GPU runs it natively (the run records what it used)"
    return f"auto: off (fp32) on {kind}"


def resolve_device(spec: str):
    """Turn a validated device spec into a torch.device (auto: CUDA, then MPS, then CPU)."""
    spec = spec.strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    problem = device_problem(spec)
    if problem:
        raise DeviceError(problem)
    return torch.device(spec)
