"""TrainConfig: the blog's defaults, one ConfigError listing every bad field, --set parsing, config files."""

from __future__ import annotations

import json

import pytest
import torch

from brnn_core.config import (
    ConfigError,
    TrainConfig,
    cpu_has_bf16,
    device_problem,
    parse_set,
    resolve_device,
)

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")


def test_defaults_are_the_blog_scripts():
    cfg = TrainConfig()
    # input_size 28, hidden_size 128, num_layers 2, batch_size 100, num_epochs 2, learning_rate 0.01, Adam
    assert (cfg.hidden_size, cfg.num_layers, cfg.batch_size, cfg.lr, cfg.optimizer, cfg.epochs) == \
        (128, 2, 100, 0.01, "adam", 2)
    assert cfg.errors(check_device=False) == {}
    assert cfg.validate(check_device=False) is cfg


@needs_no_cuda
def test_every_bad_field_is_reported_in_one_error():
    bad = {"hidden_size": 0, "lr": -1, "batch_size": 10**7, "epochs": 0, "dataset": "imagenet", "device": "cuda"}
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
    assert err.errors["dataset"] == "'imagenet' is not one of: mnist, fashion-mnist, mnist-sample"
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
    assert errors["colour"].startswith("unknown field; known fields are: dataset, hidden_size")
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


def test_device_problems():
    assert device_problem("auto") is None and device_problem(" CPU ") is None
    assert "not a device" in device_problem("tpu")
    assert "index must be a number" in device_problem("cuda:x")
    assert device_problem("cuda:1", check_available=False) is None


@needs_no_cuda
def test_cuda_on_a_machine_without_it():
    assert "not available" in device_problem("cuda")
    assert resolve_device("auto").type in ("cpu", "mps")
    with pytest.raises(ConfigError) as info:
        resolve_device("cuda:0")
    assert set(info.value.errors) == {"device"}
    # Without the availability check (a config written for another machine) cuda is accepted.
    assert TrainConfig(device="cuda").validate(check_device=False).device == "cuda"


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
    assert TrainConfig.range_for("lr") == (1e-7, 10.0)
    assert TrainConfig.range_for("dataset") is None
    assert "hidden units" in TrainConfig.help_for("hidden_size")
    assert TrainConfig.field_names()[:3] == ["dataset", "hidden_size", "num_layers"]
