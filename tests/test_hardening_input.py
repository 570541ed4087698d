"""Hardening: absurd, out-of-range and wrongly typed hyperparameters, from the CLI and from the form.

Every bad value must come back as one message that names each bad field and says what is
allowed: exit code 2 on the command line (no traceback, no run directory created), an error
next to the field and a disabled 'Start training' button in the dashboard.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from test_hardening_support import REPO, app_test, texts, worker_env

from brnn_core.cli import main

NO_CUDA = not torch.cuda.is_available()

# field, bad value as typed on the command line, what the message must say
BAD_VALUES = [
    ("hidden_size", "0", r"allowed 1 to 4096"),
    ("hidden_size", "-5", r"allowed 1 to 4096"),
    ("hidden_size", "1e9", r"allowed 1 to 4096"),
    ("hidden_size", "abc", r"expected a whole number"),
    ("hidden_size", "1.5", r"expected a whole number"),
    ("lr", "-1", r"allowed 1e-07 to 10"),
    ("lr", "0", r"allowed 1e-07 to 10"),
    ("lr", "nan", r"allowed 1e-07 to 10"),
    ("lr", "inf", r"allowed 1e-07 to 10"),
    ("lr", "1e308", r"allowed 1e-07 to 10"),
    ("lr", "fast", r"expected a number"),
    ("batch_size", str(10**7), r"allowed 1 to 65536"),
    ("batch_size", "0", r"allowed 1 to 65536"),
    ("epochs", "0", r"allowed 1 to 1000"),
    ("epochs", "2.5", r"expected a whole number"),
    ("num_layers", "99", r"allowed 1 to 8"),
    ("dropout", "1.5", r"allowed 0 to 0.9"),
    ("val_fraction", "0.99", r"allowed 0.01 to 0.5"),
    ("log_interval", "0", r"allowed 1 to 100000"),
    ("seed", "-1", r"allowed 0 to"),
    ("dataset", "imagenet", r"not one of: mnist, fashion-mnist, mnist-sample"),
    ("optimizer", "rmsprop", r"not one of: adam, adamw, sgd"),
    ("head", "middle", r"not one of: bidir, last"),
    ("amp", "fp8", r"not one of: off, bf16, fp16"),
    ("device", "tpu", r"not a device; use auto, cpu, cuda, cuda:N or mps"),
    ("device", "cuda:x", r"GPU index must be a number"),
]
if NO_CUDA:
    BAD_VALUES += [("device", "cuda", r"CUDA is not available on this machine"),
                   ("device", "cuda:0", r"CUDA is not available on this machine")]


def _train_in_process(capsys, tmp_path, *sets: str) -> tuple[int, str]:
    args = ["train", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data")]
    for pair in sets:
        args += ["--set", pair]
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.parametrize(("name", "value", "allowed"), BAD_VALUES,
                         ids=[f"{n}={v}" for n, v, _ in BAD_VALUES])
def test_cli_names_the_bad_field_and_what_is_allowed(capsys, tmp_path, name, value, allowed):
    rc, text = _train_in_process(capsys, tmp_path, f"{name}={value}", "hidden_size=8" if name != "hidden_size"
                                 else "epochs=1")
    assert rc == 2, text
    assert f"  {name}: " in text, text
    assert re.search(allowed, text), text
    assert "Traceback" not in text
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "a run was created"


def test_cli_unknown_field_and_malformed_set(capsys, tmp_path):
    rc, text = _train_in_process(capsys, tmp_path, "colour=red")
    assert rc == 2 and "colour: unknown field; known fields are: dataset, hidden_size" in text, text
    rc, text = _train_in_process(capsys, tmp_path, "lr")
    assert rc == 2 and "expected key=value" in text, text


def test_cli_subprocess_lists_every_bad_field_once_with_exit_2(tmp_path):
    """The real command line, all at once: one message, each field with what is allowed, exit 2."""
    bad = {"hidden_size": "0", "lr": "-1", "batch_size": str(10**7), "epochs": "0", "dataset": "nope",
           "num_layers": "two", "amp": "fp8"}
    if NO_CUDA:
        bad["device"] = "cuda"
    args = [sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(tmp_path / "runs"),
            "--data-dir", str(tmp_path / "data")]
    for key, value in bad.items():
        args += ["--set", f"{key}={value}"]
    proc = subprocess.run(args, cwd=REPO, env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert "Traceback" not in err + proc.stdout
    assert err.count("invalid training config") == 1, err
    for key in bad:
        assert f"  {key}: " in err, f"{key} not named in:\n{err}"
    assert "allowed 1 to 4096" in err and "allowed 1e-07 to 10" in err and "allowed 1 to 65536" in err
    assert "allowed 1 to 1000" in err and "not one of: mnist, fashion-mnist, mnist-sample" in err
    assert "expected a whole number, got 'two'" in err
    if NO_CUDA:
        assert "CUDA is not available" in err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_cli_config_file_with_wrong_types(capsys, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"hidden_size": "big", "lr": [1], "epochs": True, "batch_size": None,
                               "dataset": 5, "dropout": {"x": 1}}))
    rc = main(["train", "--config", str(cfg), "--runs-dir", str(tmp_path / "runs")])
    text = capsys.readouterr().err
    assert rc == 2, text
    for key in ("hidden_size", "lr", "epochs", "batch_size", "dataset", "dropout"):
        assert f"  {key}: " in text, text
    for content in ("[1, 2", "{not json", "[]"):
        cfg.write_text(content)
        assert main(["train", "--config", str(cfg), "--runs-dir", str(tmp_path / "runs")]) == 2
        assert "config:" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "says"), [
    (["evaluate", "X.pt", "--dataset", "imagenet"], "unknown dataset 'imagenet'; choose one of"),
    (["evaluate", "X.pt", "--dataset", "mnist-sample", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["evaluate", "X.pt", "--dataset", "mnist-sample", "--device", "tpu"], "--device: 'tpu' is not a device"),
    (["predict", "X.pt", "img.png", "--top", "0"], "--top must be at least 1"),
    (["predict", "missing.pt", "img.png"], "missing.pt: no such file"),
    (["train", "--resume", "../../etc"], "not a valid run id"),
])
def test_cli_other_commands_reject_bad_arguments(capsys, tmp_path, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BRNN_RUNS_DIR", str(tmp_path / "runs"))
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err and "Traceback" not in err


FORM_CASES = [("w_hidden_size", 0, "Hidden size", "allowed 1 to 4096"),
              ("w_lr", -1.0, "Learning rate", "allowed 1e-07 to 10"),
              ("w_batch_size", 10**7, "Batch size", "allowed 1 to 65536"),
              ("w_epochs", 0, "Epochs", "allowed 1 to 1000")]


def test_form_names_each_bad_field_and_disables_start(monkeypatch, tmp_path):
    at = app_test(monkeypatch, tmp_path / "runs")
    at.run()
    assert not at.exception, texts(at.exception)
    start = lambda: next(b for b in at.button if b.label == "Start training")  # noqa: E731
    assert not start().disabled
    for key, bad, label, allowed in FORM_CASES:
        good = at.number_input(key=key).value
        at.number_input(key=key).set_value(bad).run()
        assert not at.exception, texts(at.exception)
        errors = texts(at.error)
        assert any(label in e and allowed in e for e in errors), (key, errors)
        assert any("Fix the highlighted hyperparameters" in e and label in e for e in errors), errors
        assert start().disabled, f"Start training enabled with {key}={bad}"
        at.number_input(key=key).set_value(good).run()
        assert not start().disabled and not at.error, texts(at.error)
    # All four at once: every field is named in one summary.
    for key, bad, _, _ in FORM_CASES:
        at.number_input(key=key).set_value(bad)
    at.run()
    summary = [e for e in texts(at.error) if "Fix the highlighted" in e]
    assert len(summary) == 1 and all(label in summary[0] for _, _, label, _ in FORM_CASES), summary
    assert start().disabled
    assert not (tmp_path / "runs").exists() or not [p for p in (tmp_path / "runs").iterdir()
                                                    if not p.name.startswith(".")]


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_form_offers_no_cuda_device_without_cuda(monkeypatch, tmp_path):
    at = app_test(monkeypatch, tmp_path / "runs")
    at.run()
    options = at.selectbox(key="w_device").options
    assert not any("cuda" in o for o in options), options
