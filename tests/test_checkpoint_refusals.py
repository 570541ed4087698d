"""Checkpoint files that must be refused: damaged, foreign and malicious ones.

Each bad file must give a message that says what is wrong (for a shape mismatch: which layer,
expected and found shapes) through load_checkpoint/Predictor, the CLI (exit 2, no traceback)
and the Predict page (st.error, no exception). A pickle that would run code when loaded must
be refused without running anything.
"""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, TINY, app_test, make_run, texts, worker_env
from PIL import Image

from brnn_core.checkpoint import FORMAT, CheckpointError, load_checkpoint, save_checkpoint
from brnn_core.cli import main
from brnn_core.inference.predictor import Predictor
from brnn_core.model import ModelConfig, RecurrentClassifier
from ui.common import picker_id

CLASSES = [str(i) for i in range(10)]


def _dump(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A real dashboard checkpoint of a tiny model (hidden 8, 1 layer, 10 classes); no training needed."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ckpt") / "good.pt"
    save_checkpoint(path, RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1)), classes=CLASSES, step=3)
    return path


def bad_checkpoints(good: Path) -> dict[str, tuple[bytes, str]]:
    """name -> (file bytes, regex the message must match)."""
    raw = good.read_bytes()
    obj = torch.load(good, weights_only=True)
    bare = dict(obj["model_state"])
    other = RecurrentClassifier(ModelConfig(hidden_size=16, num_layers=1)).state_dict()

    def header(**changes):
        return _dump({**obj, **changes})

    def bare_with(**changes):
        state = dict(bare)
        for key, value in changes.items():
            if value is None:
                del state[key.replace("__", ".")]
            else:
                state[key.replace("__", ".")] = value
        return _dump(state)

    return {
        "empty": (b"", r"the file is empty \(0 bytes\)"),
        "truncated": (raw[: len(raw) // 2], r"truncated"),
        "truncated-header": (raw[:64], r"truncated|not a (readable )?PyTorch checkpoint"),
        "random-bytes": (np.random.default_rng(1).bytes(4096), r"not a (readable )?PyTorch checkpoint"),
        "text-renamed": (b"epoch,loss\n1,0.5\nthis is a csv file, not weights\n" * 10,
                         r"not a (readable )?PyTorch checkpoint"),
        "other-hidden-size": (header(model_state=other),
                              r"layer lstm\.weight_hh_l0: expected shape \(32, 8\), found \(64, 16\)"),
        "other-class-count": (header(model_state={**bare, "fc.weight": torch.zeros(5, 16),
                                                  "fc.bias": torch.zeros(5)}),
                              r"layer fc\.weight: expected shape \(10, 16\), found \(5, 16\)"),
        "class-names-mismatch": (header(classes=["a", "b"]), r"2 class names for a model with 10 outputs"),
        "header-hidden-0": (header(model_config={**obj["model_config"], "hidden_size": 0}),
                            r"model_config\.hidden_size is 0"),
        "header-not-a-number": (header(model_config={**obj["model_config"], "num_layers": "two"}),
                                r"model_config\.num_layers is 'two'"),
        "missing-key": (bare_with(lstm__weight_hh_l0_reverse=None),
                        r"missing layer lstm\.weight_hh_l0_reverse \(expected shape \(32, 8\)\)"),
        "extra-key": (bare_with(extra__weight=torch.zeros(3, 3)), r"unexpected layer extra\.weight \(3, 3\)"),
        "wrong-shape-key": (bare_with(fc__bias=torch.zeros(7)), r"layer fc\.bias: expected shape \(10,\), "
                                                                 r"found \(7,\)"),
        "no-weights": (_dump({"epoch": 3, "note": "hello"}), r"without model weights"),
        "a-list": (_dump([1, 2, 3]), r"holds a list"),
        "one-layer-input-20": (bare_with(lstm__weight_ih_l0=torch.zeros(32, 20),
                                         lstm__weight_ih_l0_reverse=torch.zeros(32, 20)),
                               r"reads rows of 20 pixels; this dashboard feeds 28"),
    }


CASE_NAMES = ["empty", "truncated", "truncated-header", "random-bytes", "text-renamed", "other-hidden-size",
              "other-class-count", "class-names-mismatch", "header-hidden-0", "header-not-a-number",
              "missing-key", "extra-key", "wrong-shape-key", "no-weights", "a-list", "one-layer-input-20"]


@pytest.fixture(scope="module")
def bad_files(good, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    folder = tmp_path_factory.mktemp("bad")
    out = {}
    for name, (data, pattern) in bad_checkpoints(good).items():
        path = folder / f"{name}.pt"
        path.write_bytes(data)
        out[name] = (path, pattern)
    assert sorted(out) == sorted(CASE_NAMES)
    return out


def test_the_good_checkpoint_works(good, digit_png, capsys):
    assert Predictor.from_checkpoint(good).predict(np.asarray(Image.open(digit_png))) is not None
    assert main(["predict", str(good), str(digit_png)]) == 0


@pytest.mark.parametrize("name", CASE_NAMES)
def test_load_and_predictor_say_what_is_wrong(bad_files, name):
    path, pattern = bad_files[name]
    with pytest.raises(CheckpointError, match=pattern):
        Predictor.from_checkpoint(path)  # load_checkpoint + build the model
    with pytest.raises(CheckpointError, match=pattern):
        Predictor.from_checkpoint(path.read_bytes())  # the same bytes as an upload


@pytest.mark.parametrize("name", CASE_NAMES)
def test_cli_predict_and_evaluate_exit_2_with_the_message(bad_files, digit_png, capsys, name):
    path, pattern = bad_files[name]
    for args in (["predict", str(path), str(digit_png)], ["evaluate", str(path), "--dataset", "mnist-sample"]):
        rc = main(args)
        err = capsys.readouterr().err
        assert rc == 2, (args, err)
        assert err.startswith("error: ") and "Traceback" not in err
        assert re.search(pattern, err), err


def test_evaluate_refuses_a_checkpoint_with_another_class_count(good, tmp_path, capsys):
    """A sound 5-class model is fine to load, but not to evaluate on a 10-class dataset."""
    state = dict(torch.load(good, weights_only=True)["model_state"])
    state.update({"fc.weight": torch.zeros(5, 16), "fc.bias": torch.zeros(5)})
    path = tmp_path / "five.pt"
    path.write_bytes(_dump(state))
    assert Predictor.from_checkpoint(path).model.cfg.num_classes == 5
    assert main(["evaluate", str(path), "--dataset", "mnist-sample"]) == 2
    assert "predicts 5 classes but mnist-sample has 10" in capsys.readouterr().err


# ------------------------------------------------------------------ not checkpoints at all


@pytest.fixture
def real_ckpt_bytes(tmp_path) -> bytes:
    path = tmp_path / "real.pt"
    torch.manual_seed(0)
    save_checkpoint(path, RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=2)), classes=CLASSES)
    return path.read_bytes()


@pytest.mark.parametrize(("name", "make", "expected"), [
    ("empty.pt", lambda real: b"", "the file is empty"),
    ("half.pt", lambda real: real[: len(real) // 2], "not a readable PyTorch checkpoint, the file is truncated"),
    ("random.pt", lambda real: os.urandom(4096), "not a"),
    ("notes.pt", lambda real: b"these are my notes, not a checkpoint\n" * 20, "not a"),
])


def test_files_that_are_not_checkpoints(tmp_path, real_ckpt_bytes, name, make, expected):
    path = tmp_path / name
    path.write_bytes(make(real_ckpt_bytes))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message
    assert "could run code" not in message  # damaged is not dangerous


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_random_bytes_never_escape_as_other_exceptions(tmp_path):
    # The weights-only unpickler raises KeyError, IndexError, struct.error... on arbitrary bytes.
    gen = torch.Generator().manual_seed(0)
    for i in range(200):
        blob = bytes(torch.randint(0, 256, (int(torch.randint(1, 300, (1,), generator=gen)),), generator=gen,
                                   dtype=torch.uint8).tolist())
        with pytest.raises(CheckpointError):
            load_checkpoint(b"\x80\x02" + blob if i % 2 else blob)


def test_other_pickled_things(tmp_path):
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="holds a list, expected a checkpoint dict"):
        load_checkpoint(tmp_path / "list.pt")
    torch.save({"epoch": 3}, tmp_path / "meta.pt")
    with pytest.raises(CheckpointError, match="a dict without model weights"):
        load_checkpoint(tmp_path / "meta.pt")
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match="is a folder"):
        load_checkpoint(tmp_path)
    torch.save({"format": FORMAT, "model_config": {"hidden_size": 8, "colour": "red"}}, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="damaged header"):
        load_checkpoint(tmp_path / "bad.pt")


# ------------------------------------------------------------------ pickles that run code


class _Touch:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path(self.marker).touch, ())


class _System:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Eval:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (eval, (f"__import__('pathlib').Path({self.marker!r}).touch()",))


def payloads(marker: Path) -> dict[str, bytes]:
    return {
        "torch.save-path-touch": _dump({"model_state": _Touch(marker)}),
        "torch.save-os-system": _dump(_System(marker)),
        "torch.save-eval": _dump({"fc.weight": torch.zeros(1), "x": _Eval(marker)}),
        "pickle-protocol-2": pickle.dumps(_System(marker), protocol=2),
        "pickle-protocol-5": pickle.dumps({"a": _Touch(marker)}, protocol=5),
        "legacy-torch-format": _legacy(_System(marker)),
    }


def _legacy(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


PAYLOADS = ["torch.save-path-touch", "torch.save-os-system", "torch.save-eval", "pickle-protocol-2",
            "pickle-protocol-5", "legacy-torch-format"]


def test_code_carrying_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model_state": {"fc.weight": torch.zeros(2, 2)}, "x": _Touch(marker)}, path)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match="refused, it holds Python objects") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(path.read_bytes())
    assert not marker.exists()
    # The payload is live: an unsafe load runs it. (This is what load_checkpoint must never do.)
    torch.load(path, weights_only=False)
    assert marker.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("kind", PAYLOADS)
def test_code_carrying_pickles_are_refused_without_running(tmp_path, digit_png, capsys, kind):
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    path.write_bytes(payloads(marker)[kind])
    with pytest.raises(CheckpointError, match=r"refused|not a (readable )?PyTorch checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError):
        load_checkpoint(path.read_bytes())
    with pytest.raises(CheckpointError):
        Predictor.from_checkpoint(path)
    assert main(["predict", str(path), str(digit_png)]) == 2
    assert main(["evaluate", str(path), "--dataset", "mnist-sample"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not marker.exists(), "loading the file ran its code"


@pytest.mark.worker
@pytest.mark.slow
def test_code_carrying_pickle_refused_by_the_cli_subprocess(tmp_path, digit_png):
    """The refusals above run the CLI in this process (main); this one is the real command, exit code and all."""
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    path.write_bytes(payloads(marker)["torch.save-os-system"])
    proc = subprocess.run([sys.executable, "-m", "brnn_core", "predict", str(path), str(digit_png)], cwd=REPO,
                          env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "refused" in proc.stderr and "could run code" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


# ------------------------------------------------------------------ the Predict page
UI_CASES = ["empty", "random-bytes", "truncated", "other-hidden-size", "missing-key", "header-hidden-0"]


def test_predict_page_shows_an_error_for_each_bad_checkpoint(bad_files, good, tmp_path, monkeypatch):
    """Bad files planted as runs' best.pt, so the page's own picker offers them; then a code pickle."""
    runs_dir = tmp_path / "runs"
    labels, paths = {}, {}
    for name in UI_CASES:
        run = make_run(runs_dir, base=TINY, epochs=1)
        run.best_ckpt.write_bytes(bad_files[name][0].read_bytes())
        labels[picker_id(run.id)] = name  # the picker labels runs by time and suffix
        paths[picker_id(run.id)] = str(run.best_ckpt)
    at = app_test(monkeypatch, runs_dir, page="pages/predict.py")
    at.run()
    assert not at.exception, texts(at.exception)
    picker = at.sidebar.selectbox(key="ckpt_choice")
    seen = set()
    for option in picker.options:  # options show labels; the values are the files' paths
        run_id = option.split(" · ")[0]
        name = labels[run_id]
        at.sidebar.selectbox(key="ckpt_choice").select(paths[run_id]).run()
        assert not at.exception, (name, texts(at.exception))
        errors = texts(at.error)
        assert any("cannot be used" in e and re.search(bad_files[name][1], e) for e in errors), \
            (name, errors)
        seen.add(name)
    assert seen == set(UI_CASES)


def test_predict_page_refuses_a_code_pickle_without_running_it(tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    marker = tmp_path / "PWNED"
    run = make_run(runs_dir, base=TINY, epochs=1)
    run.best_ckpt.write_bytes(payloads(marker)["torch.save-path-touch"])
    at = app_test(monkeypatch, runs_dir, page="pages/predict.py")
    at.run()
    assert not at.exception, texts(at.exception)
    assert any("cannot be used" in e and "refused" in e for e in texts(at.error)), texts(at.error)
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["torch.save-path-touch", "torch.save-os-system", "pickle-protocol-2",
                                  "pickle-protocol-5"])


def test_the_payloads_are_live(tmp_path, kind):
    """Control: a plain unpickler does run each payload, so the refusals above are not vacuous."""
    import zipfile

    marker = tmp_path / "PWNED"
    data = payloads(marker)[kind]
    if data[:2] == b"PK":  # torch's zip format: the pickle is archive/data.pkl
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            data = zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))
    pickle.loads(data)
    assert marker.exists()
