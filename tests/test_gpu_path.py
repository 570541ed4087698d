"""The CUDA path's CPU-side guarantees: what runs (and what is refused) without a GPU, and the GPU check's
script on a bare Python without the dashboard's packages (benchmarks/README.md, "GPU")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from helpers import REPO, TINY, train_run, worker_env

from brnn_core.autocast_probe import lstm_autocast_dtype
from brnn_core.devices import NVML_CHECK, cpu_has_bf16, device_problem, resolve_amp
from brnn_core.inference.explain import backward_in_eval
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.runs.rundir import Run
from brnn_core.training.engine import (
    CUDA_EVAL_BATCH,
    eval_batch_size_for,
    fit,
    graphed_step,
    make_optimizer,
    train_one_epoch,
)

OPTIONAL = ("streamlit", "ray", "captum", "plotly", "mlxtend")  # none of them on the GPU machines


def hide_modules(folder, names=OPTIONAL):
    """A sitecustomize in `folder` that makes `names` fail to import (PYTHONPATH=folder: in child processes too)."""
    (folder / "sitecustomize.py").write_text(textwrap.dedent(f"""
        import sys
        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {set(names)!r}:
                    raise ImportError("hidden by the test: " + name)
        sys.meta_path.insert(0, Hide())
    """))
    return folder


def test_the_training_path_imports_and_trains_without_the_dashboards_packages(tmp_path):
    hide_modules(tmp_path)
    code = ("import torch, brnn_core.training.session, brnn_core.cli; from brnn_core.training.engine import fit;"
            "from brnn_core.model import RecurrentClassifier, ModelConfig; import sys;"
            "m = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1)); x = torch.randint(0, 256, (64, 28, 28),"
            " dtype=torch.uint8); y = torch.randint(0, 10, (64,)); o = torch.optim.Adam(m.parameters());"
            "r = fit(m, o, x, y, x, y, epochs=1, batch_size=32, seed=0);"
            f"print(r.state, sorted(k for k in sys.modules if k.split('.')[0] in {OPTIONAL!r}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=worker_env(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["finished", "[]"], proc.stdout


def test_gpu_check_runs_on_a_bare_python_and_says_what_it_skipped(tmp_path):
    """No Streamlit, Ray, captum, plotly or mlxtend (as on the GPU machines): the checks that need none run,
    the others are rows that say why they were skipped, and one results file is written."""
    (tmp_path / "site").mkdir()
    site, out = hide_modules(tmp_path / "site"), tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cuda_check", "--device", "cpu", "--quick", "--out",
                           str(out), "--data-dir", str(tmp_path / "no-data"),
                           "--only", "dtype,graphs,cells,batch,picker"],
                          cwd=REPO, env=worker_env(PYTHONPATH=str(site), CUDA_VISIBLE_DEVICES=""),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "skipped: streamlit is not installed" in proc.stdout
    [result] = out.iterdir()  # one file
    data = json.loads(result.read_text())
    rows = {(r["bench"], r["case"]): r for r in data["rows"]}
    assert data["errors"] == []
    assert rows[("picker", "Train page Device select = config.device_choices()")]["note"].startswith("skipped")
    assert rows[("graphs", "weights after the same steps: graph vs eager")]["value"] == 0  # no graph on a CPU
    assert rows[("graphs", "engine amp off eager")]["value"] > 0 and rows[("graphs", "blog loop (fp32)")]["value"] > 0
    amp = resolve_amp("auto", torch.device("cpu"))  # the defaults' precision here
    for network in ("two-way LSTM (BiLSTM)", "one-way LSTM", "two-way GRU (BiGRU)", "one-way GRU",
                    "two-way RNN (BiRNN)", "one-way RNN"):  # every entry of compare's matrix against the blog loop
        row = rows[("cells", f"engine, {network} / blog")]
        assert row["value"] > 0 and row["note"].endswith(f"amp {amp}"), row
    for mode in dict.fromkeys(("off", amp)):  # batch 96 (a multiple of 8) against the blog's 100, fp32 and auto
        assert rows[("batch", f"batch 96 / batch 100, amp {mode}")]["value"] > 0


def test_the_check_skips_a_check_that_would_start_after_its_budget(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cuda_check", "--device", "cpu", "--quick", "--out",
                           str(tmp_path), "--data-dir", str(tmp_path / "none"), "--only", "crash", "--budget-s", "0"],
                          cwd=REPO, env=worker_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [result] = tmp_path.glob("*_gpu-check.json")
    [row] = json.loads(result.read_text())["rows"]
    assert row["bench"] == "crash" and "budget was spent" in row["note"]


@pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU has no native bf16: oneDNN's LSTM refuses it")
def test_lstm_autocast_dtype_reads_the_dtype_the_lstm_ran_in():
    assert lstm_autocast_dtype("cpu", torch.bfloat16) == torch.bfloat16
    assert lstm_autocast_dtype("cpu", torch.bfloat16, RecurrentClassifier(ModelConfig(hidden_size=8))) == torch.bfloat16
    gru = RecurrentClassifier(ModelConfig(hidden_size=8, cell="gru"))
    assert lstm_autocast_dtype("cpu", torch.bfloat16, gru) == torch.float32  # CPU autocast leaves nn.GRU in fp32


def test_lstm_autocast_dtype_needs_a_recurrent_module_to_ask():
    with pytest.raises(ValueError, match="no recurrent module"):
        lstm_autocast_dtype("cpu", torch.bfloat16, torch.nn.Linear(28, 10))


@pytest.mark.parametrize("spec", ["cuda:", "cuda:x", "cuda:-1"])
def test_a_cuda_spec_without_a_number_is_refused(spec):
    assert "must be a number" in device_problem(spec, check_available=False)


def test_device_choices_never_creates_a_cuda_context():
    code = ("import torch; from brnn_core.devices import device_choices; import os; c = device_choices();"
            f"print(torch.cuda.is_initialized(), os.environ[{NVML_CHECK!r}], list(c)[:2])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=worker_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "1", "['auto',", "'cpu']"], proc.stdout


def test_the_server_asks_nvml_for_gpus():
    assert f'os.environ.setdefault("{NVML_CHECK}", "1")' in (REPO / "streamlit_app.py").read_text()


def test_a_trial_trains_where_ray_put_it():
    pytest.importorskip("ray")
    from brnn_core.sweep.trial import trial_device

    assert trial_device("cuda:1", [1]) == "cuda"  # the trial sees its one GPU as cuda:0
    assert trial_device("auto", []) == "cpu"  # no GPU given: never another trial's GPU
    assert trial_device("auto", [0]) == "auto" and trial_device("cpu", [0]) == "cpu"


def test_cpu_keeps_its_eval_batch_and_plain_adam():
    assert eval_batch_size_for(torch.device("cpu"), 250) == 250
    assert eval_batch_size_for(torch.device("cuda"), 250) == CUDA_EVAL_BATCH
    assert eval_batch_size_for(torch.device("cuda"), 10_000) == 10_000
    opt = make_optimizer(RecurrentClassifier(ModelConfig(hidden_size=8)).parameters(), "adam", 0.01)
    assert not opt.param_groups[0]["fused"]


def tiny_fit(cuda_graphs: bool | None):
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1))
    opt = make_optimizer(model.parameters(), "adam", 0.01)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 256, (150, 28, 28), dtype=torch.uint8, generator=g), torch.randint(0, 10, (150,),
                                                                                                generator=g)
    kwargs = {} if cuda_graphs is None else {"cuda_graphs": cuda_graphs}
    fit(model, opt, x[:120], y[:120], x[120:], y[120:], epochs=2, batch_size=32, seed=0, **kwargs)  # 32,32,32,24
    return model


def test_the_graph_free_path_is_bit_identical():
    """Off CUDA the step never comes from a graph: fit's weights are exactly those of the plain step."""
    plain, off, auto = tiny_fit(False), tiny_fit(True), tiny_fit(None)
    for a, b, c in zip(plain.parameters(), off.parameters(), auto.parameters(), strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    opt = make_optimizer(plain.parameters(), "adam", 0.01)
    step = graphed_step(plain, opt, "off", torch.device("cpu"))
    x = torch.zeros(4, 28, 28, dtype=torch.uint8)
    assert train_one_epoch(plain, opt, x, torch.zeros(4, dtype=torch.long), [torch.arange(4)], graph=step).completed
    assert step.problem == "not a CUDA device" and step.graph is None and step.replays == 0


def test_status_json_is_written_about_once_a_second_and_at_every_epoch_end(tmp_path, monkeypatch):
    writes: list[tuple[float, dict]] = []
    real = Run.write_status

    def recording(self, **fields):
        writes.append((time.monotonic(), fields))
        return real(self, **fields)

    monkeypatch.setattr(Run, "write_status", recording)
    run, state = train_run(tmp_path, **{**TINY, "epochs": 3})  # a log (and a status chance) every step
    assert state == "finished"
    steps = [(t, f) for t, f in writes if f.get("state") == "running" and "val_loss" not in f]
    heartbeats = [b[0] - a[0] for a, b in zip(steps, steps[1:], strict=False)
                  if a[1].get("message") == b[1].get("message") and a[1].get("epoch") == b[1].get("epoch")]
    assert all(gap >= 0.9 for gap in heartbeats), heartbeats
    ends = [f for _, f in writes if "val_loss" in f]
    assert [f["epoch"] for f in ends] == [1, 2, 3]  # each epoch's end written at once
    assert run.status()["state"] == "finished" and run.status()["epoch"] == 3


def test_attribution_blocks_turn_cudnn_off_one_at_a_time():
    inside, overlap = threading.Event(), []

    def first():
        with backward_in_eval():
            inside.set()
            time.sleep(0.3)
            overlap.append(torch.backends.cudnn.enabled)

    t = threading.Thread(target=first)
    t.start()
    inside.wait(5)
    t0 = time.monotonic()
    with backward_in_eval():
        waited = time.monotonic() - t0
        assert not torch.backends.cudnn.enabled
    t.join()
    assert waited > 0.2 and overlap == [False] and torch.backends.cudnn.enabled
