"""TrainConfig: the blog's defaults, one ConfigError listing every bad field, --set parsing, config files.

And how absurd, out-of-range and wrongly typed hyperparameters reach the user, from the CLI and from the
form: one message that names each bad field and says what is allowed, exit code 2 on the command line
(no traceback, no run directory created), an error next to the field and a disabled 'Start training'
button in the dashboard.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from helpers import REPO, app_test, texts, worker_env

from brnn_core.cli import main
from brnn_core.config import (
    DATASET_NAMES,
    EPOCHS_AUTO,
    TEACH_DEFAULTS,
    ConfigError,
    TrainConfig,
    asks_auto_epochs,
    epochs_auto_label,
    load_train_config,
    parse_set,
    resolve_epochs,
)
from brnn_core.devices import DeviceError, cpu_has_bf16, device_problem, resolve_device
from brnn_core.runs.rundir import new_run_config
from brnn_core.training.commands import LiveSettings

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")


def test_defaults_are_the_blog_scripts():
    cfg = TrainConfig()
    # input_size 28, hidden_size 128, num_layers 2, batch_size 100, learning_rate 0.01, Adam
    assert (cfg.hidden_size, cfg.num_layers, cfg.batch_size, cfg.lr, cfg.optimizer) == (128, 2, 100, 0.01, "adam")
    assert cfg.epochs == 0  # auto: the number for the dataset once validated (below)
    assert cfg.errors(check_device=False) == {}
    assert cfg.validate(check_device=False) is cfg


@pytest.mark.parametrize("dataset", DATASET_NAMES)
def test_auto_epochs_become_the_datasets_number_when_validated(dataset):
    """0 = auto resolves where every entry point validates, so config.json and the live controls hold a number."""
    assert TrainConfig.from_dict({"dataset": dataset}, check_device=False).epochs == EPOCHS_AUTO[dataset] >= 1
    assert TrainConfig(dataset=dataset).validate(check_device=False).epochs == EPOCHS_AUTO[dataset]
    assert TrainConfig.from_dict({"dataset": dataset, "epochs": "0"}, check_device=False).epochs == EPOCHS_AUTO[dataset]
    assert TrainConfig.from_dict({"dataset": dataset, "epochs": 5}, check_device=False).epochs == 5  # explicit stays
    assert resolve_epochs(0, dataset) == EPOCHS_AUTO[dataset] and resolve_epochs(7, dataset) == 7
    assert epochs_auto_label(dataset) == f"0 = auto: {EPOCHS_AUTO[dataset]} for this dataset"


def test_auto_epochs_give_the_offline_sample_time_for_the_live_controls():
    # decided in docs/decisions/091-epochs-per-dataset.md; the full datasets keep the blog's 2
    assert EPOCHS_AUTO["mnist-sample"] > 2 and {EPOCHS_AUTO[d] for d in ("mnist", "fashion-mnist", "kmnist")} == {2}
    assert f"0 = auto: {EPOCHS_AUTO['mnist-sample']} for mnist-sample" in TrainConfig.help_for("epochs")
    assert TEACH_DEFAULTS["epochs"] == 2  # Teach it fine-tunes for its own explicit epochs


def test_a_live_change_of_epochs_needs_a_number_not_auto():
    live = LiveSettings.of(TrainConfig.from_dict({"dataset": "mnist"}, check_device=False))
    assert live.epochs == EPOCHS_AUTO["mnist"] and live.changed("epochs", "7").epochs == 7
    for auto in (0, "0", " 0 ", 0.0):
        assert asks_auto_epochs(auto)
        with pytest.raises(ValueError, match="epochs 0 \\(auto\\) is for a new run"):
            live.changed("epochs", auto)
    assert not asks_auto_epochs("two") and not asks_auto_epochs(3)


def test_cli_train_records_the_resolved_epochs(tmp_path):
    """`train` without --set epochs gets the dataset's number, --set epochs=5 stays 5, and config.json (which
    a resume, a branch and a sweep's best-config read) holds the number, never 0."""
    data = tmp_path / "data"
    auto = load_train_config(None, ["dataset=mnist-sample"], data, check_device=False)
    assert new_run_config(auto, data)["train"]["epochs"] == EPOCHS_AUTO["mnist-sample"]
    assert load_train_config(None, ["dataset=mnist-sample", "epochs=5"], data, check_device=False).epochs == 5
    config_file = tmp_path / "best-config.json"
    config_file.write_text(json.dumps({**auto.to_dict(), "epochs": 3}))
    assert load_train_config(config_file, [], data, check_device=False).epochs == 3
    # A run's own config.json, as an older version wrote it: resumed with the epochs it was made with.
    old = {k: v for k, v in TrainConfig().to_dict().items() if k not in ("drawn_share", "augment")} | {"epochs": 2}
    assert TrainConfig.from_dict(old, check_device=False).epochs == 2


@needs_no_cuda
def test_every_bad_field_is_reported_in_one_error():
    bad = {"hidden_size": 0, "lr": -1, "batch_size": 10**7, "epochs": -1, "dataset": "imagenet", "device": "cuda"}
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict(bad)
    err = info.value
    assert isinstance(err, ValueError)
    assert set(err.errors) == set(bad)
    text = str(err)
    for name in bad:
        assert f"  {name}: " in text
    assert "allowed 1 to 4096" in err.errors["hidden_size"]
    assert "out of range" in err.errors["lr"]
    assert err.errors["dataset"] == "'imagenet' is not one of: mnist-sample, mnist, fashion-mnist, kmnist"
    assert "CUDA is not available" in err.errors["device"]


def test_wrong_types_are_reported_with_range_errors_together():
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict({"lr": "abc", "hidden_size": "12.5", "epochs": True, "batch_size": "0",
                               "colour": "red"})
    errors = info.value.errors
    assert errors["lr"] == "expected a number, got 'abc'"
    assert errors["hidden_size"] == "expected a whole number, got '12.5'"
    assert errors["epochs"] == "expected a whole number, got True"
    assert "out of range" in errors["batch_size"]
    assert errors["colour"].startswith("unknown field; known fields are: dataset, cell, bidirectional, hidden_size")
    assert set(errors) == {"lr", "hidden_size", "epochs", "batch_size", "colour"}


def test_validate_on_a_constructed_config_reports_types_and_nan():
    cfg = TrainConfig(lr="abc", dropout=float("nan"), head="middle", optimizer="rmsprop", amp="fp8")
    with pytest.raises(ConfigError) as info:
        cfg.validate(check_device=False)
    assert set(info.value.errors) == {"lr", "dropout", "head", "optimizer", "amp"}
    assert "expected a number" in info.value.errors["lr"]
    assert "out of range" in info.value.errors["dropout"]  # NaN fails the range comparison


def test_strings_from_forms_are_coerced_losslessly():
    cfg = TrainConfig.from_dict({"lr": " 0.001 ", "hidden_size": "1e2", "epochs": 3.0, "dropout": 0, "seed": "7"},
                                check_device=False)
    assert (cfg.lr, cfg.hidden_size, cfg.epochs, cfg.dropout, cfg.seed) == (0.001, 100, 3, 0.0, 7)
    assert isinstance(cfg.dropout, float) and isinstance(cfg.epochs, int)
    assert TrainConfig.from_dict(cfg.to_dict(), check_device=False) == cfg


def test_fp16_needs_cuda():
    with pytest.raises(ConfigError) as info:
        TrainConfig(device="cpu", amp="fp16").validate()
    assert set(info.value.errors) == {"amp"}
    if cpu_has_bf16():
        assert TrainConfig(device="cpu", amp="bf16").validate().amp == "bf16"
    else:  # oneDNN's LSTM has no bf16 path without AVX512-BF16/AMX: refused up front, not mid-run
        with pytest.raises(ConfigError, match="bf16 on the CPU needs native bf16"):
            TrainConfig(device="cpu", amp="bf16").validate()
        assert TrainConfig(device="cpu", amp="bf16").validate(check_device=False).amp == "bf16"
    # "auto" resolves to the CPU on a machine without CUDA: refused there before a run starts and fails
    auto = TrainConfig(device="auto", amp="fp16")
    if torch.cuda.is_available():
        assert auto.validate().amp == "fp16"
    else:
        with pytest.raises(ConfigError, match="this machine has none"):
            auto.validate()
    assert auto.validate(check_device=False).amp == "fp16"  # a config written for another machine
    # amp=auto always validates: it resolves to something this device runs (devices.resolve_amp)
    for device in ("cpu", "auto"):
        assert TrainConfig(device=device, amp="auto").validate().amp == "auto"


def test_device_problems():
    assert device_problem("auto") is None and device_problem(" CPU ") is None
    assert "not a device" in device_problem("tpu")
    assert "index must be a number" in device_problem("cuda:x")
    assert device_problem("cuda:1", check_available=False) is None


@needs_no_cuda
def test_cuda_on_a_machine_without_it():
    assert "not available" in device_problem("cuda")
    assert resolve_device("auto").type in ("cpu", "mps")
    with pytest.raises(DeviceError, match="CUDA is not available"):
        resolve_device("cuda:0")
    # Without the availability check (a config written for another machine) cuda is accepted.
    assert TrainConfig(device="cuda").validate(check_device=False).device == "cuda"


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_cell_and_direction_with_the_head_auto_resolves_to(cell):
    """head=auto resolves when validated, as epochs=0 does: bidir two-way, last one-way (the state after the last row
    is the only one-way state that has read the whole image). An explicit head stays; bidir one-way is refused."""
    two = TrainConfig.from_dict({"cell": cell}, check_device=False)
    one = TrainConfig.from_dict({"cell": cell, "bidirectional": "no"}, check_device=False)
    assert (two.cell, two.bidirectional, two.head) == (cell, True, "bidir")
    assert (one.cell, one.bidirectional, one.head) == (cell, False, "last")
    assert TrainConfig.from_dict({"cell": cell, "head": "last"}, check_device=False).head == "last"  # the blog's
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict({"cell": cell, "bidirectional": False, "head": "bidir"}, check_device=False)
    assert set(info.value.errors) == {"head"} and "set head=auto or head=last" in info.value.errors["head"]
    assert TrainConfig().head == "auto" and TrainConfig().cell == "lstm" and TrainConfig().bidirectional is True


def test_yes_or_no_is_read_from_every_way_a_form_or_command_line_writes_it():
    for raw, wanted in [("true", True), ("False", False), (" YES ", True), ("no", False), ("1", True), ("0", False),
                        (True, True), (False, False), (1, True), (0, False)]:
        assert TrainConfig.from_dict({"bidirectional": raw}, check_device=False).bidirectional is wanted, raw
    for raw in ("maybe", "", "2", 2, 0.5, "on"):
        with pytest.raises(ConfigError) as info:
            TrainConfig.from_dict({"bidirectional": raw}, check_device=False)
        assert info.value.errors == {"bidirectional": f"expected true or false (also yes/no or 1/0), got {raw!r}"}
    assert "bidirectional" in TrainConfig(bidirectional="yes").errors(check_device=False)  # unvalidated text


def test_a_config_files_auto_head_follows_a_direction_set_on_top(tmp_path):
    """--config then --set bidirectional=false: the file's head (auto) resolves for the one-way net, not before."""
    config_file = tmp_path / "my.json"
    config_file.write_text(json.dumps({"cell": "gru", "hidden_size": 8}))
    cfg = load_train_config(config_file, ["bidirectional=false"], tmp_path / "data", check_device=False)
    assert (cfg.cell, cfg.bidirectional, cfg.head, cfg.hidden_size) == ("gru", False, "last", 8)
    assert new_run_config(cfg, tmp_path / "data")["train"]["head"] == "last"  # config.json records what was used


def test_parse_set():
    assert parse_set(["lr=0.001", "hidden-size=64", " epochs =3", "dataset=", "note=a=b"]) == \
        {"lr": "0.001", "hidden_size": "64", "epochs": "3", "dataset": "", "note": "a=b"}
    assert parse_set([]) == {}
    with pytest.raises(ConfigError) as info:
        parse_set(["lr", "=5", "epochs=2"])
    assert set(info.value.errors) == {"lr", "=5"}
    assert "expected key=value" in info.value.errors["lr"]


def test_from_file(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"hidden_size": 64, "lr": "0.002", "dataset": "mnist-sample"}))
    cfg = TrainConfig.from_file(good)
    assert (cfg.hidden_size, cfg.lr, cfg.num_layers) == (64, 0.002, 2)


@pytest.mark.parametrize(("content", "expected"), [
    (None, "file not found"),
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "must hold a JSON object"),
])


def test_from_file_errors(tmp_path, content, expected):
    path = tmp_path / "cfg.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_file(path)
    assert set(info.value.errors) == {"config"}
    assert expected in info.value.errors["config"]
    assert str(path) in info.value.errors["config"]


def test_from_file_with_bad_values_names_the_fields(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"lr": 50, "epochs": "two"}))
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_file(path, check_device=False)
    assert set(info.value.errors) == {"lr", "epochs"}


def test_field_metadata_for_forms():
    assert "hidden units" in TrainConfig.help_for("hidden_size").lower()
    assert TrainConfig.field_names()[:5] == ["dataset", "cell", "bidirectional", "hidden_size", "num_layers"]


# ------------------------------------------------------------------ bad values from the CLI and the form
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
    ("epochs", "-1", r"allowed 0 to 1000"),
    ("epochs", "1001", r"allowed 0 to 1000"),
    ("epochs", "2.5", r"expected a whole number"),
    ("num_layers", "99", r"allowed 1 to 8"),
    ("dropout", "1.5", r"allowed 0 to 0.9"),
    ("val_fraction", "0.99", r"allowed 0.01 to 0.5"),
    ("log_interval", "0", r"allowed 1 to 100000"),
    ("seed", "-1", r"allowed 0 to"),
    ("dataset", "imagenet", r"not one of: mnist-sample, mnist, fashion-mnist"),
    ("optimizer", "rmsprop", r"not one of: adam, adamw, sgd"),
    ("head", "middle", r"not one of: auto, bidir, last"),
    ("cell", "tcn", r"'tcn' is not one of: lstm, gru, rnn"),
    ("bidirectional", "maybe", r"expected true or false \(also yes/no or 1/0\), got 'maybe'"),
    ("amp", "fp8", r"not one of: auto, off, bf16, fp16"),
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
    assert rc == 2 and "colour: unknown field; known fields are: dataset, cell, bidirectional, hidden_size" in text
    rc, text = _train_in_process(capsys, tmp_path, "lr")
    assert rc == 2 and "expected key=value" in text, text


def test_cli_refuses_the_bidir_head_on_a_one_way_net_naming_the_fix(capsys, tmp_path):
    rc, text = _train_in_process(capsys, tmp_path, "bidirectional=false", "head=bidir", "hidden_size=8")
    assert rc == 2 and "head: bidir reads the backward direction, which a one-way net (bidirectional=false) does not " \
                       "have: set head=auto or head=last, or bidirectional=true" in text, text
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "a run was created"


@pytest.mark.worker
@pytest.mark.slow
def test_cli_subprocess_lists_every_bad_field_once_with_exit_2(tmp_path):
    """The real command line, all at once: one message, each field with what is allowed, exit 2."""
    bad = {"hidden_size": "0", "lr": "-1", "batch_size": str(10**7), "epochs": "-1", "dataset": "nope",
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
    assert "allowed 0 to 1000" in err and "not one of: mnist-sample, mnist, fashion-mnist" in err
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
              ("w_epochs", -1, "Epochs", "allowed 0 to 1000")]


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
