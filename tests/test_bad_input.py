"""Mistakes a user can make that must end in a message naming the fix, never in a traceback, gigabytes of memory
or a half-made run: checkpoints whose header lies, images of enormous size, and CLI input that does not fit.

The CLI answers with exit 2; the ones that once took gigabytes run as a real subprocess under an address-space limit
so that a regression fails fast instead of filling the machine's memory, the others in this process (the `brnn`
fixture: the same brnn_core.cli.main and environment, without a process start and a torch import each).
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    REPO,
    assert_bad_input,
    build_app,
    cli_env,
    copy_run,
    metric_lines,
    no_exception,
    texts,
    tree_digest,
    wait_for,
    write_idx_dataset,
)
from PIL import Image

from brnn_core.checkpoint import CheckpointError, load_checkpoint
from brnn_core.data.canvas import MAX_IMAGE_PIXELS, prepare
from brnn_core.inference.predictor import Predictor
from brnn_core.runs.rundir import list_runs

TINY_SETS = ["--set", "hidden_size=16", "--set", "cpu_threads=1", "--set", "dataset=mnist-sample",
             "--set", "epochs=1"]
MEMORY_LIMIT = 6 << 30  # address space for a CLI process: torch needs about 4 GiB of it, a lying file wanted 14
PEAK_RSS_LIMIT_MB = 1500


def run_limited(args: list, runs_dir: Path, data_dir: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess,
                                                                                 float]:
    """`python -m brnn_core ARGS` under MEMORY_LIMIT of address space; (its result, its peak resident MB)."""
    out, err = tmp_path / "limited.out", tmp_path / "limited.err"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    env = cli_env(runs_dir, data_dir) | {"OPENBLAS_NUM_THREADS": "1"}
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen([sys.executable, "-m", "brnn_core", *map(str, args)], cwd=REPO, env=env,
                                stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, preexec_fn=limit)
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, so its own peak memory is known
        proc.returncode = os.waitstatus_to_exitcode(status)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())
    return result, usage.ru_maxrss / 1024


def lying(checkpoint: Path, target: Path, **model_config) -> Path:
    """`checkpoint` re-saved with its header's model config changed (its tensors kept as they are)."""
    obj = torch.load(checkpoint, weights_only=True)
    obj["model_config"] = {**obj["model_config"], **model_config}
    buf = io.BytesIO()
    torch.save(obj, buf)
    target.write_bytes(buf.getvalue())
    return target


# ------------------------------------------------------------------ checkpoints whose header lies
def test_a_header_past_the_limits_is_refused_by_name(finished, tmp_path):
    path = lying(finished.best_ckpt, tmp_path / "huge.pt", hidden_size=30000, num_layers=8)
    assert path.stat().st_size < 200_000
    with pytest.raises(CheckpointError, match=r"model_config\.hidden_size is 30000, expected 1 to 4096"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"model_config\.num_layers is 9, expected 1 to 8"):
        load_checkpoint(lying(finished.best_ckpt, tmp_path / "deep.pt", num_layers=9))
    with pytest.raises(CheckpointError, match=r"model_config\.input_size is 20, expected 28 to 28"):
        load_checkpoint(lying(finished.best_ckpt, tmp_path / "rows.pt", input_size=20))


def test_a_header_within_the_limits_that_lies_is_refused_before_a_model_is_built(finished, tmp_path):
    """hidden 4096 in 8 layers is allowed by the limits and needs gigabytes: the tensors' shapes refuse it."""
    path = lying(finished.best_ckpt, tmp_path / "lie.pt", hidden_size=4096, num_layers=8)
    with pytest.raises(CheckpointError, match=r"header's model_config does not fit its tensors: .*"
                                              r"layer fc\.weight: expected shape \(10, 8192\), found \(10, 32\)"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="does not fit its tensors"):
        Predictor.from_checkpoint(path.read_bytes())  # an upload's bytes


@pytest.mark.parametrize("header", [{"hidden_size": 30000, "num_layers": 8}, {"hidden_size": 4096, "num_layers": 8}],
                         ids=["past-the-limits", "within-the-limits"])
@pytest.mark.slow
@pytest.mark.worker
def test_cli_predict_refuses_a_lying_checkpoint_in_little_memory(finished, digit_png, runs_dir, data_dir, tmp_path,
                                                                 header):
    path = lying(finished.best_ckpt, tmp_path / "lie.pt", **header)
    result, peak_mb = run_limited(["predict", path, digit_png], runs_dir, data_dir, tmp_path)
    assert_bad_input(result, str(path), "model_config")
    assert peak_mb < PEAK_RSS_LIMIT_MB, peak_mb
    result, peak_mb = run_limited(["evaluate", path, "--dataset", "mnist-sample"], runs_dir, data_dir, tmp_path)
    assert_bad_input(result, "model_config")
    assert peak_mb < PEAK_RSS_LIMIT_MB, peak_mb


def test_the_predict_page_shows_why_an_uploaded_lying_checkpoint_is_refused(finished, dirs):
    runs_dir, _ = dirs
    copy_run(finished, runs_dir)  # a run checkpoint to start from, as a user has
    data = lying(finished.best_ckpt, runs_dir.parent / "lie.pt", hidden_size=30000, num_layers=8).read_bytes()
    at = build_app("pages/predict.py")
    at.run()
    no_exception(at)
    at.sidebar.file_uploader[0].set_value(("lie.pt", data, "application/octet-stream")).run()
    no_exception(at)
    errors = texts(at.error)
    assert any("cannot be used" in e and "model_config.hidden_size is 30000" in e and "lie.pt" in e for e in errors), \
        errors


# ------------------------------------------------------------------ images of enormous size
@pytest.fixture(scope="module")
def huge_png(tmp_path_factory) -> Path:
    """13000 x 13000 black pixels: a few hundred KB as a PNG, 169 million pixels once decoded."""
    path = tmp_path_factory.mktemp("huge") / "huge.png"
    Image.new("L", (13000, 13000)).save(path, optimize=True)
    return path


@pytest.mark.slow
@pytest.mark.worker
def test_cli_predict_refuses_a_huge_image_before_decoding_it(brnn, finished, huge_png, digit_png, runs_dir, data_dir,
                                                            tmp_path):
    assert huge_png.stat().st_size < 1_000_000
    t0 = time.monotonic()
    result, peak_mb = run_limited(["predict", finished.best_ckpt, huge_png], runs_dir, data_dir, tmp_path)
    assert_bad_input(result, "13000 x 13000 pixels is too large", f"at most {MAX_IMAGE_PIXELS:,} pixels",
                     "crop it to the digit or scale it down")
    assert peak_mb < PEAK_RSS_LIMIT_MB and time.monotonic() - t0 < 60, (peak_mb, time.monotonic() - t0)
    result = brnn(["predict", finished.best_ckpt, digit_png], runs_dir, data_dir)
    assert result.returncode == 0 and result.stdout.startswith(f"{digit_png}: "), result.stderr


def test_prepare_refuses_a_huge_array_and_takes_one_at_the_limit():
    """The Predict page's canvas and the Predictor take arrays: the same bound, before any float copy."""
    side = int(MAX_IMAGE_PIXELS ** 0.5)
    with pytest.raises(ValueError, match=rf"{side + 1} x {side} pixels is too large"):
        prepare(np.broadcast_to(np.zeros((1, 1, 4), np.uint8), (side, side + 1, 4)))  # no memory behind it
    canvas = np.zeros((side, side), np.uint8)
    canvas[100:900, 480:520] = 255
    assert prepare(canvas).shape == (28, 28)


# ------------------------------------------------------------------ CLI mistakes
def test_evaluate_on_a_dataset_of_other_classes_exits_2(brnn, finished, runs_dir, data_dir):
    write_idx_dataset(data_dir, folder="FashionMNIST/raw")  # on disk, so only the classes can refuse it
    result = brnn(["evaluate", finished.best_ckpt, "--dataset", "fashion-mnist"], runs_dir, data_dir)
    assert_bad_input(result, "trained on other classes", "T-shirt/top", "evaluate it on mnist-sample or mnist")
    assert "accuracy" not in result.stdout


def write_config(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind", ["not-utf8", "deep-nesting", "a-folder", "unreadable"])
def test_a_bad_config_file_exits_2_and_creates_nothing(brnn, kind, runs_dir, data_dir, tmp_path):
    config, needles = {
        "not-utf8": (lambda: write_config(tmp_path / "c.json", b'{"lr": 0.01, "\xff\xfe": 1}'),
                     ["is not UTF-8 text", "save it as a UTF-8 JSON file"]),
        "deep-nesting": (lambda: write_config(tmp_path / "c.json", b"[" * 200_000 + b"]" * 200_000),
                         ["nests too deeply", "one flat JSON object"]),
        "a-folder": (lambda: tmp_path, ["is a folder; give a JSON file"]),
        "unreadable": (lambda: tmp_path / "missing" / "c.json", ["file not found"]),
    }[kind]
    result = brnn(["train", "--config", config(), *TINY_SETS], runs_dir, data_dir)
    assert_bad_input(result, *needles)
    assert "runs folder writable" not in result.stderr
    assert list(runs_dir.iterdir()) == []


@pytest.mark.parametrize("kind", ["not-a-checkpoint", "a-folder", "other-architecture"])
def test_a_bad_init_from_exits_2_before_any_run_is_created(brnn, kind, finished, runs_dir, data_dir):
    target, needles = {
        "not-a-checkpoint": ("/etc/passwd", ["--set init_from: /etc/passwd", "not a"]),
        "a-folder": ("/etc", ["init_from", "give the path of a .pt file"]),
        "other-architecture": (finished.best_ckpt, ["is a two-way LSTM (BiLSTM) of hidden 16, 2 layers",
                                                    "hidden_size=16"]),
    }[kind]
    sets = [*TINY_SETS, "--set", f"init_from={target}"]
    if kind == "other-architecture":
        sets = [*sets, "--set", "hidden_size=24"]
    result = brnn(["train", *sets], runs_dir, data_dir)
    assert_bad_input(result, *needles)
    assert list(runs_dir.iterdir()) == []


def test_resume_of_a_finished_run_is_refused_and_changes_nothing(brnn, finished, runs_dir, data_dir):
    run = copy_run(finished, runs_dir)
    before = tree_digest(run.path)
    result = brnn(["train", "--resume", run.id], runs_dir, data_dir)
    assert_bad_input(result, f"run {run.id} has finished its 1 epoch", "only test it again",
                     f"--resume {run.id} --set epochs=2", f"--from {run.id}")
    result = brnn(["train", "--resume", run.id, "--set", "epochs=1"], runs_dir, data_dir)
    assert_bad_input(result, "has finished its 1 epoch")
    assert tree_digest(run.path) == before
    assert sum(line.split(b",")[2] == b"test" for line in metric_lines(run)) == 1


# ------------------------------------------------------------------ a runs folder that becomes read-only
def _can_remount_read_only() -> bool:
    """Whether this user may make a private mount namespace with a read-only bind mount (root, util-linux)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount --bind / /mnt && mount -o remount,bind,ro /mnt"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.worker
@pytest.mark.skipif(not _can_remount_read_only(),
                    reason="needs root with unshare/nsenter: the runs folder is made read-only by a bind mount in the "
                           "CLI's own mount namespace (root ignores file permissions)")
def test_a_runs_folder_made_read_only_mid_run_says_why_the_run_stopped(runs_dir, data_dir):
    """The CLI runs in a mount namespace of its own; once it trains, its runs folder is remounted read-only there
    (a full or read-only disk as the worker meets it), while this test still reads the run as it was left."""
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", sys.executable, "-m", "brnn_core", "train",
                             *TINY_SETS, "--set", "epochs=3", "--set", "log_interval=1"],
                            cwd=REPO, env=cli_env(runs_dir, data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        wait_for(lambda: list_runs(runs_dir) and (list_runs(runs_dir)[0].status().get("step") or 0) >= 1,
                 300, "the run's first step", proc=proc)
        run = list_runs(runs_dir)[0]
        # Made read-only aside, then moved over the runs folder in one step: a remount in place fails (busy) when
        # the CLI opens a file for writing through the new bind mount in between.
        aside = runs_dir.parent / "read-only-aside"
        aside.mkdir()
        subprocess.run(["nsenter", "-t", str(proc.pid), "-m", "sh", "-c",
                        f'mount --bind "{runs_dir}" "{aside}" && mount -o remount,bind,ro "{aside}" && '
                        f'mount --move "{aside}" "{runs_dir}"'], check=True, timeout=30)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, (out[-2000:], err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out, err
    last = (err.strip().splitlines() or [f"nothing on stderr; stdout ends {out.strip().splitlines()[-1:]}"])[-1]
    assert last.startswith("error: the run ended failed, but its status could not be saved"), (out[-500:], err)
    assert "make the runs folder writable" in last and f"--resume {run.id}" in last, last
    assert json.loads(run.status_path.read_text())["state"] == "running"  # what the read-only folder kept
