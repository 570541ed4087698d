"""`python -m brnn_core` as a user runs it: tmp runs/data folders, no internet.

Exit codes: 0 ok, 2 bad input with a one-line message and never a traceback, 1 failure. train, evaluate and predict
each run once as a real subprocess (`worker`); what ends before any work runs in this process (the `brnn` fixture:
brnn_core.cli.main with the same environment), a process start and a torch import cheaper.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_bad_input, run_cli
from PIL import Image

from brnn_core.checkpoint import load_checkpoint
from brnn_core.data.canvas import load_image
from brnn_core.data.datasets import IDX_FILES
from brnn_core.devices import cpu_has_bf16
from brnn_core.inference.predictor import Predictor
from brnn_core.runs.rundir import Run, list_runs
from brnn_core.training.engine import evaluate


@pytest.mark.slow
@pytest.mark.worker
def test_train_prints_the_run_directory_and_finishes(runs_dir, data_dir):
    result = run_cli(["train", "--set", "epochs=1", "--set", "hidden_size=32"], runs_dir, data_dir)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    found = re.search(r"^run directory: (.+)$", result.stdout, re.M)
    run = Run(Path(found.group(1)))
    assert run.path.parent == runs_dir and [r.id for r in list_runs(runs_dir)] == [run.id]
    status = run.status()
    assert status["state"] == "finished"
    assert run.config()["train"]["dataset"] == "mnist-sample"  # full MNIST is not in the empty data folder
    assert run.config()["train"]["hidden_size"] == 32 and run.config()["train"]["epochs"] == 1
    assert re.search(r"^test: loss \d\.\d{4}  accuracy \d+\.\d\d%$", result.stdout, re.M)
    assert f"finished: test accuracy {100 * status['test_acc']:.2f}%" in result.stdout
    assert load_checkpoint(run.best_ckpt).model_config.hidden_size == 32


def test_train_with_a_bad_value_exits_2_and_creates_no_run(brnn, runs_dir, data_dir):
    result = brnn(["train", "--set", "lr=-1", "--set", "hidden_size=abc"], runs_dir, data_dir)
    assert_bad_input(result, "invalid training config", "lr: -1.0 is out of range; allowed 1e-07 to 10",
                     "hidden_size: expected a whole number, got 'abc'")
    assert list(runs_dir.iterdir()) == []


@pytest.mark.slow
@pytest.mark.worker
def test_evaluate_prints_loss_accuracy_and_per_class(trained_ckpt, runs_dir, data_dir, sample):
    result = run_cli(["evaluate", trained_ckpt, "--dataset", "mnist-sample"], runs_dir, data_dir)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "dataset: mnist-sample (test, 500 images" in out
    loss = float(re.search(r"^loss: (\d+\.\d+)$", out, re.M).group(1))
    accuracy = float(re.search(r"^accuracy: (\d+\.\d+)%$", out, re.M).group(1))
    per_class = re.findall(r"^ +(\d): +(\d+\.\d+)%$", out, re.M)
    assert [c for c, _ in per_class] == [str(d) for d in range(10)]
    expected = evaluate(load_checkpoint(trained_ckpt).build_model(), sample.test_x, sample.test_y)
    assert accuracy == pytest.approx(100 * expected.accuracy, abs=0.006)
    assert loss == pytest.approx(expected.loss, abs=1e-4)
    assert [float(a) for _, a in per_class] == pytest.approx([100 * a for a in expected.per_class], abs=0.006)


@pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no native bf16 (AVX512-BF16/AMX): bf16 is refused, "
                                              "see test_evaluate_bf16_on_a_cpu_without_it_is_refused")
def test_evaluate_with_bf16_autocast_matches_the_library(brnn, trained_ckpt, runs_dir, data_dir, sample):
    result = brnn(["evaluate", trained_ckpt, "--dataset", "mnist-sample", "--amp", "bf16"], runs_dir, data_dir)
    assert result.returncode == 0, result.stderr
    assert ", autocast bf16" in result.stdout
    accuracy = float(re.search(r"^accuracy: (\d+\.\d+)%$", result.stdout, re.M).group(1))
    model = load_checkpoint(trained_ckpt).build_model()
    bf16 = evaluate(model, sample.test_x, sample.test_y, amp="bf16")
    assert accuracy == pytest.approx(100 * bf16.accuracy, abs=0.006)
    # bf16 keeps 8 bits of mantissa: a few borderline digits at most may flip against fp32
    assert abs(bf16.accuracy - evaluate(model, sample.test_x, sample.test_y).accuracy) <= 0.01


@pytest.mark.skipif(cpu_has_bf16(), reason="this CPU runs bf16 (covered by the test above)")
def test_evaluate_bf16_on_a_cpu_without_it_is_refused(brnn, trained_ckpt, runs_dir, data_dir):
    result = brnn(["evaluate", trained_ckpt, "--dataset", "mnist-sample", "--amp", "bf16"], runs_dir, data_dir)
    assert result.returncode == 2, result.stderr
    assert "--amp: bf16 on the CPU needs native bf16 instructions" in result.stderr
    assert "use off" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.worker
def test_predict_prints_the_top_classes(trained_ckpt, runs_dir, data_dir, sample, tmp_path):
    digit = tmp_path / "digit.png"
    Image.fromarray(sample.test_x[0].numpy()).resize((280, 280)).save(digit)  # white on black, opaque
    blank = tmp_path / "blank.png"
    Image.new("RGB", (280, 280), "white").save(blank)
    result = run_cli(["predict", trained_ckpt, digit, blank, "--top", "2"], runs_dir, data_dir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    top = re.fullmatch(rf"{re.escape(str(digit))}: (\d) (\d+\.\d)%, (\d) (\d+\.\d)%", lines[0])
    assert top, lines
    probs = Predictor.from_checkpoint(trained_ckpt).predict(load_image(digit))
    best = np.argsort(probs)[::-1][:2]
    assert [int(top.group(1)), int(top.group(3))] == best.tolist()
    assert float(top.group(2)) == pytest.approx(100 * probs[best[0]], abs=0.06)
    assert lines[1] == f"{blank}: blank image, nothing to classify"


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_garbage_checkpoint_exits_2_without_traceback(brnn, command, runs_dir, data_dir, tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"this is not a checkpoint at all\n" * 64)
    image = tmp_path / "x.png"
    Image.new("L", (28, 28)).save(image)
    args = [command, garbage] + (["--dataset", "mnist-sample"] if command == "evaluate" else [image])
    assert_bad_input(brnn(args, runs_dir, data_dir), str(garbage), "not a")


def test_evaluate_full_mnist_offline_names_the_folder(brnn, trained_ckpt, runs_dir, data_dir):
    # cli_env routes every download through a refused localhost proxy: offline, whatever the machine.
    result = brnn(["evaluate", trained_ckpt, "--dataset", "mnist"], runs_dir, data_dir)
    assert_bad_input(result, str((data_dir / "MNIST" / "raw").resolve()), *(f"{b}.gz" for b in IDX_FILES),
                     "mnist-sample")


@pytest.mark.parametrize(("argv0", "prog"), [("/venv/bin/brnn", "brnn"),
                                             ("/checkout/brnn_core/__main__.py", "python -m brnn_core")])
def test_usage_names_the_command_the_user_typed(argv0, prog, monkeypatch, capsys):
    from brnn_core.cli import main

    monkeypatch.setattr("sys.argv", [argv0, "train", "--help"])
    with pytest.raises(SystemExit):
        main()
    assert capsys.readouterr().out.startswith(f"usage: {prog} train ")
    monkeypatch.setattr("sys.argv", [argv0, "runs", "--help"])
    with pytest.raises(SystemExit):
        main()
    assert capsys.readouterr().out.startswith(f"usage: {prog} runs ")


def test_bench_says_where_the_suite_runs_from(capsys):
    """The suite is measurement code, not part of the installed package: `bench` says how to run it."""
    from brnn_core.cli import main

    assert main(["bench", "--quick", "--only", "train"]) == 2
    err = capsys.readouterr().err
    assert "make bench" in err and "python -m benchmarks" in err
