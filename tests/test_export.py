"""`python -m brnn_core export` (brnn_core.inference.export): ONNX and TorchScript files that give a checkpoint's
probabilities in their own runtimes (ONNX Runtime, torch.jit.load) on real digits and other batch sizes, for
every architecture; bad input refused with nothing written; docs/cli.md's ONNX Runtime lines run without torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest
import torch
from helpers import REPO, run_cli
from PIL import Image

from brnn_core.checkpoint import load_checkpoint, save_checkpoint
from brnn_core.cli import main
from brnn_core.inference import export
from brnn_core.inference.export import INPUT_NAME, OUTPUT_NAME, export_model
from brnn_core.inference.predictor import Predictor
from brnn_core.model import CELLS, ModelConfig, RecurrentClassifier

CHECKED = 37  # an odd batch, unlike the one the files are traced with (export.TRACE_BATCH)


@pytest.fixture(scope="module")
def digits(sample) -> torch.Tensor:
    """The offline sample's test digits as the files take them: (N, 28, 28) floats in [0, 1]."""
    return sample.test_x.float() / 255.0


def run_file(path, fmt: str, images: torch.Tensor) -> np.ndarray:
    """An exported file's probabilities, from its own runtime alone."""
    if fmt == "onnx":
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert [i.shape for i in session.get_inputs()] == [["batch", 28, 28]]  # the batch size is free
        return session.run([OUTPUT_NAME], {INPUT_NAME: images.numpy()})[0]
    loaded = torch.jit.load(str(path))
    return loaded(images).detach().numpy()


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_the_file_gives_the_probabilities_the_predict_page_shows(trained_ckpt, digits, tmp_path, fmt):
    out = tmp_path / f"model.{fmt}"
    done = export_model(trained_ckpt, fmt, out, digits=digits)
    assert done.path == out and done.checked == len(digits) and done.max_difference <= 1e-4
    predictor = Predictor.from_checkpoint(trained_ckpt)
    assert predictor.calibrated and predictor.temperature != 1.0  # the temperature is part of what is exported
    images = digits[-CHECKED:]
    expected = np.stack([predictor.predict(image.numpy()) for image in images])
    got = run_file(out, fmt, images)
    assert got.shape == (CHECKED, 10) and np.abs(got - expected).max() <= 1e-4
    assert (got.argmax(1) == expected.argmax(1)).all()
    if fmt == "onnx":
        meta = onnxruntime.InferenceSession(str(out)).get_modelmeta().custom_metadata_map
    else:
        files = {"metadata.json": ""}
        torch.jit.load(str(out), _extra_files=files)
        meta = json.loads(files["metadata.json"])
    assert json.loads(meta["classes"]) == load_checkpoint(trained_ckpt).classes
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# Every model the product trains: each cell one- and two-way (two layers), and the other heads, input scales and
# depths on the LSTM.
ARCHITECTURES = [{"cell": cell, "bidirectional": two_way, "head": "bidir" if two_way else "last", "num_layers": 2}
                 for cell in CELLS for two_way in (True, False)] + [
    {"cell": "lstm", "bidirectional": True, "head": "last", "input_scale": "unit", "num_layers": 1},
    {"cell": "gru", "bidirectional": True, "head": "bidir", "input_scale": "unit", "num_layers": 3, "hidden_size": 5},
]


def arch_id(arch: dict) -> str:
    return "-".join([arch["cell"], "two-way" if arch["bidirectional"] else "one-way", arch["head"],
                     arch.get("input_scale", "standard"), f"{arch['num_layers']}x{arch.get('hidden_size', 12)}"])


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=arch_id)
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_every_cell_and_direction_exports(arch, fmt, digits, tmp_path):
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig(**{"hidden_size": 12, "input_scale": "standard", **arch}))
    ckpt = tmp_path / "model.pt"  # random weights: the export must not depend on what was learnt
    save_checkpoint(ckpt, model, classes=[str(k) for k in range(10)])
    out = tmp_path / f"model.{fmt}"
    done = export_model(ckpt, fmt, out, digits=digits[:64])
    assert done.max_difference <= 1e-4
    with torch.inference_mode():
        expected = model.eval()(digits[:CHECKED]).softmax(-1).numpy()
    assert np.abs(run_file(out, fmt, digits[:CHECKED]) - expected).max() <= 1e-4


@pytest.mark.worker
def test_the_command_checks_on_real_digits_before_it_reports_success(trained_ckpt, tmp_path):
    out = tmp_path / "model.onnx"
    done = run_cli(["export", trained_ckpt, "--format", "onnx", "--out", out], tmp_path / "runs", tmp_path / "data")
    assert done.returncode == 0, done.stderr
    assert f"{out}: onnx, checked on 500 test digits of mnist-sample" in done.stdout
    assert out.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def refused(capsys, *args) -> str:
    """main(export ARGS) exits 2; its error message."""
    assert main(["export", *map(str, args)]) == 2
    return capsys.readouterr().err


def test_bad_input_exits_2_naming_the_fix_and_writes_nothing(trained_ckpt, tmp_path, capsys):
    ckpt_bytes = trained_ckpt.read_bytes()
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(trained_ckpt), "--format", "tflite", "--out", str(tmp_path / "m.tflite")])
    assert exit_.value.code == 2 and "invalid choice: 'tflite' (choose from onnx, torchscript)" in \
        capsys.readouterr().err.replace("'onnx'", "onnx").replace("'torchscript'", "torchscript")
    assert "does not exist; create it" in refused(capsys, trained_ckpt, "--format", "onnx", "--out",
                                                  tmp_path / "no" / "m.onnx")
    assert "is a file, not a folder" in refused(capsys, trained_ckpt, "--format", "onnx", "--out",
                                                trained_ckpt / "m.onnx")
    assert "is a folder" in refused(capsys, trained_ckpt, "--format", "onnx", "--out", tmp_path)
    if sys.platform == "linux":  # /proc takes no new files, even from root
        assert "cannot write in /proc" in refused(capsys, trained_ckpt, "--format", "onnx", "--out",
                                                  "/proc/m.onnx")
    assert "the checkpoint itself" in refused(capsys, trained_ckpt, "--format", "torchscript", "--out",
                                              trained_ckpt, "--force")
    kept = tmp_path / "kept.onnx"
    kept.write_bytes(b"an earlier export")
    assert "add --force to replace it" in refused(capsys, trained_ckpt, "--format", "onnx", "--out", kept)
    other = tmp_path / "other.pt"  # a checkpoint of another model's shape
    torch.save(torch.nn.Conv2d(1, 4, 3).state_dict(), other)
    assert "missing lstm.weight_ih_l0" in refused(capsys, other, "--format", "onnx", "--out", tmp_path / "x.onnx")
    assert trained_ckpt.read_bytes() == ckpt_bytes and kept.read_bytes() == b"an earlier export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.onnx", "other.pt"]


def test_a_file_that_fails_its_check_is_not_kept(trained_ckpt, digits, tmp_path, monkeypatch, capsys):
    """The check is what decides: with no difference allowed at all, ONNX Runtime's float rounding fails it."""
    kept = tmp_path / "model.onnx"
    kept.write_bytes(b"an earlier export")
    monkeypatch.setattr(export, "TOLERANCE", 0.0)
    monkeypatch.setattr(export, "check_digits", lambda: digits)
    assert main(["export", str(trained_ckpt), "--format", "onnx", "--out", str(kept), "--force"]) == 1
    assert "nothing was written" in capsys.readouterr().err
    assert kept.read_bytes() == b"an earlier export" and [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_without_onnx_runtime_the_command_says_what_to_install(trained_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as where it is not installed
    message = refused(capsys, trained_ckpt, "--format", "onnx", "--out", tmp_path / "m.onnx")
    assert "needs onnxruntime" in message and "pip install 'brnn-dashboard[interop]'" in message
    assert not list(tmp_path.iterdir())


def docs_example() -> str:
    """The ONNX Runtime lines in docs/cli.md, as a user copies them."""
    text = (REPO / "docs" / "cli.md").read_text()
    return re.search(r"<!-- onnx-runtime-example[^>]*-->\s*```python\n(.*?)```", text, re.S).group(1)


@pytest.mark.worker
def test_the_docs_lines_run_the_file_without_torch(trained_ckpt, digits, sample, tmp_path):
    code = docs_example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    export_model(trained_ckpt, "onnx", tmp_path / "model.onnx", digits=digits[:64])
    image = sample.test_x[3].numpy()
    Image.fromarray(image).save(tmp_path / "digit.png")
    no_torch = "import sys; sys.modules['torch'] = None\n"  # any import of torch fails: the lines do not need it
    done = subprocess.run([sys.executable, "-c", no_torch + code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    predictor = Predictor.from_checkpoint(trained_ckpt)
    probs = predictor.predict(image.astype(np.float32) / 255)
    assert done.stdout.split() == [predictor.classes[int(probs.argmax())], f"{probs.max():.1%}"]
