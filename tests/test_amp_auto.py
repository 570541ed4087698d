"""amp=auto: what it resolves to, what a run records and keeps (resume, branch), and where autocast stops.

"No native bf16" is made by monkeypatching `devices.cpu_has_bf16`, so every test means something on any CPU;
a test that must run bf16 kernels is skipped where the CPU lacks them.
"""

from __future__ import annotations

import pytest
import torch

from brnn_core import devices
from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import AMP_MODES, OLDER_RUN_DEFAULTS, TrainConfig
from brnn_core.data.batching import to_input
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.runs.branch import plan_branch
from brnn_core.runs.rundir import create_run, new_run_config
from brnn_core.training import engine
from brnn_core.training.worker import train_run_dir
from tests.helpers import TINY, build_app, make_run, no_exception

CPU = torch.device("cpu")
NATIVE_BF16 = devices.cpu_has_bf16()
needs_bf16 = pytest.mark.skipif(not NATIVE_BF16, reason="this CPU lacks native bf16 (AVX512-BF16 or AMX)")
# TINY without its amp: the default. No pen-stroke copies to make: seconds a run.
RUN = {k: v for k, v in {**TINY, "epochs": 2, "drawn_share": 0.0}.items() if k != "amp"}


def native_bf16(monkeypatch, value: bool) -> None:
    monkeypatch.setattr(devices, "cpu_has_bf16", lambda: value)


def stop_after_first_epoch(run):
    return lambda epoch, metrics: run.send_command("stop")


def test_auto_is_the_default_and_resolves_to_what_this_cpu_runs_natively():
    assert TrainConfig().amp == "auto"  # docs/decisions/022-amp-auto-default.md
    assert devices.resolve_amp("auto", CPU) == ("bf16" if NATIVE_BF16 else "off")
    assert devices.amp_auto_label("cpu") == ("auto: bf16 on this CPU" if NATIVE_BF16 else
                                             "auto: off (fp32) on this CPU, which lacks native bf16")
    for explicit in ("off", "bf16", "fp16"):
        assert devices.resolve_amp(explicit, CPU) == explicit  # explicit choices are never second-guessed
    assert devices.resolve_amp("auto", torch.device("mps")) == "off"  # not measured there


def test_auto_is_off_on_a_cpu_without_native_bf16_and_bf16_is_still_refused(monkeypatch):
    native_bf16(monkeypatch, False)
    assert devices.resolve_amp("auto", CPU) == "off"
    assert devices.amp_auto_label("cpu") == "auto: off (fp32) on this CPU, which lacks native bf16"
    assert isinstance(engine.autocast(CPU, "auto"), type(engine.autocast(CPU, "off")))  # no autocast at all
    assert TrainConfig(device="cpu", amp="auto").validate().amp == "auto"
    with pytest.raises(ValueError, match="AVX512-BF16 or AMX.*use off"):
        TrainConfig(device="cpu", amp="bf16").validate()


def test_a_run_records_what_auto_resolved_to_and_a_resume_keeps_it(tmp_path, monkeypatch):
    runs, data = tmp_path / "runs", tmp_path / "data"
    run = make_run(runs, data, base=RUN)
    native_bf16(monkeypatch, False)
    assert train_run_dir(run, data_dir=data, after_epoch=stop_after_first_epoch(run)) == "stopped"
    config = run.config()
    assert (config["train"]["amp"], config["amp"]) == ("auto", "off")
    native_bf16(monkeypatch, True)  # the machine now says bf16: the resumed run must not switch precision
    assert train_run_dir(run, data_dir=data, resume=True) == "finished"
    assert run.config()["amp"] == "off"
    assert load_checkpoint(run.last_ckpt).train_config["amp"] == "off"  # what the checkpoint trained in


def test_a_run_from_before_auto_resumes_in_fp32(tmp_path, monkeypatch):
    assert OLDER_RUN_DEFAULTS["amp"] == "off"
    runs, data = tmp_path / "runs", tmp_path / "data"
    config = new_run_config(TrainConfig.from_dict({**RUN, "epochs": 1}), data)
    del config["train"]["amp"]  # a config.json written before the setting existed: not auto, whatever the default
    run = create_run(runs, config)
    native_bf16(monkeypatch, True)
    assert train_run_dir(run, data_dir=data) == "finished"
    assert run.config()["amp"] == "off"
    assert load_checkpoint(run.best_ckpt).train_config["amp"] == "off"
    assert "amp" not in run.config()["train"]
    assert plan_branch(runs, run.id, overrides={"epochs": 2}).cfg.amp == "off"  # its branch too, not the default


def test_a_branch_keeps_the_precision_its_parent_trained_in(tmp_path, monkeypatch):
    runs, data = tmp_path / "runs", tmp_path / "data"
    parent = make_run(runs, data, base=RUN, epochs=1)
    native_bf16(monkeypatch, False)
    assert train_run_dir(parent, data_dir=data) == "finished"
    native_bf16(monkeypatch, True)  # auto would now mean bf16
    assert plan_branch(runs, parent.id).cfg.amp == "off"
    assert plan_branch(runs, parent.id, overrides={"amp": "auto"}).cfg.amp == "auto"  # unless the user asks


def test_the_classifier_layer_and_the_loss_stay_fp32_under_autocast():
    model = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1))
    feat = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.fc(feat).dtype == torch.bfloat16  # what autocast alone would do to it
        logits = model.head(feat)
    assert logits.dtype == torch.float32
    assert torch.equal(logits, model.fc(feat))  # exactly the fp32 layer
    assert engine.VALIDATION_AMP == "off"


@needs_bf16
def test_bf16_runs_the_lstm_only_and_best_pt_is_chosen_on_fp32_validation():
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1))
    x = torch.randint(0, 256, (64, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (64,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.lstm(to_input(x[:4]))[0].dtype == torch.bfloat16
        assert model(to_input(x[:4])).dtype == torch.float32
    opt = engine.make_optimizer(model.parameters(), "adam", 0.01)
    result = engine.fit(model, opt, x[:48], y[:48], x[48:], y[48:], epochs=1, batch_size=16, seed=0, amp="bf16")
    fp32 = engine.evaluate(model, x[48:], y[48:], amp="off")
    assert result.last_val.loss == fp32.loss
    assert engine.evaluate(model, x[48:], y[48:], amp="bf16").loss != fp32.loss
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the optimizer's weights stay fp32


def test_the_train_page_says_what_auto_means_here(dirs):
    at = build_app().run()  # the dashboard opens on the Train page
    no_exception(at)
    options = at.selectbox(key="w_amp").options
    assert options[AMP_MODES.index("auto")] == devices.amp_auto_label("cpu")
    assert at.selectbox(key="w_amp").value == "auto"  # the default (docs/decisions/022-amp-auto-default.md)
    said = f"mixed precision {devices.amp_auto_label('auto')} (Advanced)"  # above the form, whose Advanced is shut
    assert any(said in c.value for c in at.caption)


def test_a_checkpoint_is_evaluated_in_its_runs_precision_only_where_this_machine_runs_it(monkeypatch):
    native_bf16(monkeypatch, False)
    assert [devices.eval_amp(a, CPU) for a in ("bf16", "fp16", "off", "auto", None)] == ["off"] * 5
    native_bf16(monkeypatch, True)
    assert [devices.eval_amp(a, CPU) for a in ("bf16", "fp16", "off", None)] == ["bf16", "off", "off", "off"]


@needs_bf16
def test_the_runs_page_report_matches_the_runs_own_test_precision(tmp_path, monkeypatch):
    from brnn_core.training.reports import compute_report, read_report

    runs, data = tmp_path / "runs", tmp_path / "data"
    run = make_run(runs, data, base={**RUN, "amp": "bf16", "epochs": 1})
    assert train_run_dir(run, data_dir=data) == "finished"
    at_finish = read_report(run)
    assert at_finish["amp"] == "bf16"
    (run.path / "report.json").unlink()
    again = compute_report(run, data)  # the Runs page's "Compute the test report"
    assert again["amp"] == "bf16" and abs(again["accuracy"] - at_finish["accuracy"]) <= 0.01
    native_bf16(monkeypatch, False)  # a machine without native bf16 evaluates the same run in fp32
    assert compute_report(run, data)["amp"] == "off"
