"""Sweep search specs and plans: every bad spec is refused (exit 2, one message naming the key) before Ray starts.

These run in-process and fast: no Ray, no training. The end-to-end sweeps are in test_sweep.py.
"""

from __future__ import annotations

import sys

import pytest
from helpers import free_port as closed_port  # nothing listens there

from brnn_core.cli import main
from brnn_core.config import TrainConfig
from brnn_core.sweep.plan import SweepRequest, plan_sweep
from brnn_core.sweep.records import trial_run_id
from brnn_core.sweep.space import (
    SearchSpec,
    SweepError,
    TrialStopped,
    parse_search,
    parse_spec,
    to_mutation,
    to_tune,
    trial_count,
)

BASE = TrainConfig(dataset="mnist-sample", device="cpu").to_dict()


def test_listed_values_take_the_fields_type():
    spec = parse_spec("lr", "choice:0.01, 1e-3,0.0001", BASE)
    assert spec.values == (0.01, 0.001, 0.0001) and all(isinstance(v, float) for v in spec.values)
    grid = parse_spec("hidden-size", "grid:8,16", BASE)  # dashes read as underscores, like --set
    assert grid.key == "hidden_size" and grid.values == (8, 16)
    assert parse_spec("optimizer", "choice:adam,sgd", BASE).values == ("adam", "sgd")
    assert parse_spec("cell", "choice:lstm,gru,rnn", BASE).values == ("lstm", "gru", "rnn")
    assert parse_spec("bidirectional", "grid:true, no", BASE).values == (True, False)


def test_a_searched_direction_gives_each_trial_its_own_head(tmp_path):
    """The base keeps head=auto unless it was set, so a one-way trial reads its last row and a two-way one both
    ends; an explicit head=bidir cannot be searched one-way and says so before Ray starts."""
    sets = ["epochs=2", "device=cpu", "hidden_size=8"]
    plan = plan_sweep(SweepRequest(search=["bidirectional=choice:true,false", "cell=choice:gru,rnn"], sets=sets),
                      tmp_path / "runs", tmp_path / "data")
    assert plan.base["head"] == "auto" and {s.key: s.values for s in plan.specs} == {
        "bidirectional": (True, False), "cell": ("gru", "rnn")}
    one_way = TrainConfig.from_dict({**plan.base, "bidirectional": False, "cell": "rnn"}, check_device=False)
    assert one_way.head == "last"  # as trial.plan_start builds each trial's config
    with pytest.raises(SweepError, match="--search bidirectional: 'false' is not a valid bidirectional: bidir reads "
                                         "the backward direction"):
        plan_sweep(SweepRequest(search=["bidirectional=choice:true,false"], sets=[*sets, "head=bidir"]),
                   tmp_path / "runs", tmp_path / "data")


def test_ranges():
    spec = parse_spec("lr", "loguniform:1e-4:1e-1", BASE)
    assert (spec.low, spec.high) == (1e-4, 0.1) and spec.text == "loguniform:0.0001:0.1"
    ints = parse_spec("hidden_size", "randint:8:32", BASE)
    assert (ints.low, ints.high) == (8, 32)
    assert SearchSpec.from_dict("lr", spec.to_dict()) == spec


@pytest.mark.parametrize(("key", "spec", "words"), [
    ("hiden_size", "grid:8,16", ["hiden_size", "not a training field", "hidden_size"]),
    ("cpu_threads", "grid:1,2", ["cpu_threads", "--cpus-per-trial"]),
    ("lr", "normal:0:1", ["lr=normal:0:1", "choice:a,b,c"]),
    ("lr", "choice:", ["choice:a,b,c"]),
    ("lr", "choice:0.01,,0.1", ["empty value"]),
    ("lr", "choice:0.01,fast", ["'fast'", "lr"]),
    ("lr", "grid:0.01,0.01", ["twice"]),
    ("lr", "uniform:0.1:20", ["lr", "'20'", "out of range"]),
    ("lr", "uniform:0.1:0.01", ["low end must be below"]),
    ("grad_clip", "loguniform:0:5", ["loguniform", "above 0"]),
    ("lr", "loguniform:0:0.1", ["lr", "out of range"]),
    ("lr", "uniform:0.1", ["lo:hi"]),
    ("hidden_size", "uniform:8:32", ["hidden_size", "whole number", "randint"]),
    ("lr", "randint:1:3", ["lr", "decimal", "uniform"]),
    ("optimizer", "uniform:0:1", ["optimizer", "text", "choice"]),
    ("cell", "choice:lstm,tcn", ["'tcn'", "cell", "lstm, gru, rnn"]),
    ("bidirectional", "choice:true,maybe", ["'maybe'", "bidirectional", "true or false"]),
    ("bidirectional", "grid:true,yes", ["twice"]),
    ("bidirectional", "uniform:0:1", ["bidirectional", "true or false: use choice"]),
    ("num_layers", "randint:1:9", ["num_layers", "'9'", "out of range"]),
    ("dataset", "choice:mnist,cifar", ["'cifar'", "dataset"]),
    ("device", "choice:cpu,cuda", ["device", "--set device=", "--gpus-per-trial"]),
])
def test_bad_specs_name_the_key_and_the_problem(key, spec, words):
    with pytest.raises(SweepError) as err:
        parse_spec(key, spec, BASE)
    for word in words:
        assert word in str(err.value), str(err.value)


def test_scheduler_limits():
    with pytest.raises(SweepError, match="hidden_size with --scheduler pbt.*only lr and grad_clip"):
        parse_search(["lr=grid:0.1,0.01", "hidden_size=grid:8,16"], BASE, scheduler="pbt")
    with pytest.raises(SweepError, match="epochs with --scheduler asha"):
        parse_search(["epochs=grid:2,3"], BASE, scheduler="asha")
    with pytest.raises(SweepError, match="given twice"):
        parse_search(["lr=grid:0.1,0.01", "lr=choice:0.1"], BASE)
    specs = parse_search(["lr=grid:0.1,0.01", "grad_clip=uniform:0:5"], BASE, scheduler="pbt")
    assert trial_count(specs, 3) == 6


def test_tune_domains_cover_the_spec():
    """randint's high end is included (Tune's is not), and PBT resamples listed values from the list."""
    domain = to_tune(parse_spec("hidden_size", "randint:8:9", BASE))
    draws = {domain.sample() for _ in range(200)}
    assert draws == {8, 9}
    assert to_tune(parse_spec("lr", "grid:0.1,0.01", BASE)) == {"grid_search": [0.1, 0.01]}
    assert to_mutation(parse_spec("lr", "choice:0.1,0.01", BASE)) == [0.1, 0.01]
    lr = to_tune(parse_spec("lr", "loguniform:1e-4:1e-2", BASE))
    assert all(1e-4 <= lr.sample() <= 1e-2 for _ in range(100))


def test_trial_run_ids():
    assert trial_run_id("20261201-101010-sweep-ab12", "3f2a1_00003") == "20261201-101010-sweep-ab12-t03"


def plan(tmp_path, *search, **options):
    request = SweepRequest(search=list(search), sets=["epochs=3", "device=cpu"], **options)
    return plan_sweep(request, tmp_path / "runs", tmp_path / "data")


def test_plan_defaults_fit_this_machine(tmp_path, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    p = plan(tmp_path, "lr=loguniform:1e-4:1e-1")
    assert (p.samples, p.trials, p.concurrency, p.cpus_per_trial, p.gpus_per_trial) == (8, 8, 2, 1.0, 0.0)
    assert p.base["cpu_threads"] == 1 and p.base["epochs"] == 3 and p.address is None
    grid = plan(tmp_path, "lr=grid:0.1,0.01,0.001", cpus_per_trial=2)
    assert (grid.trials, grid.concurrency, grid.base["cpu_threads"]) == (3, 1, 2)
    assert plan(tmp_path, "lr=grid:0.1,0.01", keep_all=True).keep_best is None


@pytest.mark.parametrize(("options", "words"), [
    ({"scheduler": "pbt", "trials": 1}, ["pbt", "at least 2 trials"]),
    ({"perturbation_interval": 2}, ["--perturbation-interval", "pbt"]),
    ({"scheduler": "pbt", "perturbation_interval": 3}, ["--perturbation-interval 3", "between 1 and"]),
    ({"gpus_per_trial": 0.5}, ["--gpus-per-trial 0.5", "no CUDA GPU"]),
    ({"gpus_per_trial": 1.5}, ["--gpus-per-trial 1.5", "whole GPUs"]),
    ({"cpus_per_trial": 0}, ["--cpus-per-trial 0", "above 0"]),
    ({"concurrency": 0}, ["--concurrency 0"]),
    ({"trials": 0}, ["--trials 0"]),
    ({"address": "nowhere"}, ["--address nowhere", "HOST:PORT"]),
])
def test_bad_plans(tmp_path, options, words):
    if "gpus_per_trial" in options and options["gpus_per_trial"] == 0.5:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    with pytest.raises(SweepError) as err:
        plan(tmp_path, "lr=choice:0.1,0.01", **options)
    for word in words:
        assert word in str(err.value), str(err.value)


def test_unreachable_address_fails_fast(tmp_path):
    port = closed_port()
    with pytest.raises(SweepError, match=f"127.0.0.1:{port}: nothing answers there.*ray start --head --port={port}"):
        plan(tmp_path, "lr=choice:0.1,0.01", address=f"127.0.0.1:{port}")


def test_asha_needs_two_epochs(tmp_path):
    with pytest.raises(SweepError, match="asha acts between epochs"):
        plan_sweep(SweepRequest(search=["lr=choice:0.1,0.01"], sets=["epochs=1"], scheduler="asha"),
                   tmp_path / "runs", tmp_path / "data")


@pytest.mark.parametrize("args", [
    ["--search", "hiden_size=grid:8,16"],
    ["--search", "lr=loguniform:0:1"],
    ["--search", "lr=grid:0.1,0.01", "--set", "hidden_size=0"],
    ["--search", "lr=grid:0.1,0.01", "--scheduler", "pbt", "--search", "num_layers=grid:1,2"],
    ["--search", "lr=grid:0.1,0.01", "--gpus-per-trial", "2"],
    ["--set", "epochs=2"],
    ["--resume", "no-such-sweep"],
    ["--resume", "no-such-sweep", "--trials", "4", "--scheduler", "asha"],
    ["--search", "lr=grid:0.1,0.01", "--address", f"127.0.0.1:{closed_port()}"],
])
def test_cli_bad_input_exits_2_before_ray_starts(tmp_path, capsys, args):
    """Exit 2 with one `error:` line naming the problem; no runs folder, no Ray imported."""
    import torch

    if "--gpus-per-trial" in args and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    ray_before = "ray" in sys.modules
    runs = tmp_path / "runs"
    code = main(["sweep", "--runs-dir", str(runs), "--data-dir", str(tmp_path / "data"), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and len(err) < 800, err
    assert not runs.exists() or not any(runs.rglob("*")), list(runs.rglob("*"))
    assert ray_before or "ray" not in sys.modules


def test_resume_refuses_what_only_a_new_sweep_can_change(tmp_path, capsys):
    code = main(["sweep", "--runs-dir", str(tmp_path / "runs"), "--resume", "s1", "--trials", "4", "--scheduler",
                 "asha", "--keep-all-checkpoints"])
    err = capsys.readouterr().err
    assert code == 2 and "--trials, --scheduler, --keep-all-checkpoints" in err and "sweep.json" in err, err


def test_resume_takes_a_time_budget_of_its_own_but_not_a_bad_one(tmp_path, capsys):
    code = main(["sweep", "--runs-dir", str(tmp_path / "runs"), "--resume", "s1", "--time-budget", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "--time-budget 0: minutes above 0" in err, err


def test_every_searched_dataset_is_checked_before_ray(tmp_path):
    """A searched dataset is made ready (or refused offline) once, up front: not raced for by every trial."""
    assert plan(tmp_path, "lr=grid:0.1,0.01").datasets() == ["mnist-sample"]
    both = plan(tmp_path, "dataset=choice:mnist-sample,fashion-mnist")
    assert both.datasets() == ["mnist-sample", "fashion-mnist"]


def test_more_gpus_per_trial_than_the_machine_has(tmp_path, monkeypatch):
    """An embedded Ray could never place such a trial: the sweep would wait forever, so it is refused."""
    from brnn_core.sweep import plan as plan_module

    monkeypatch.setattr(plan_module, "local_gpus", lambda: 1)  # the one machine fact a CPU-only box lacks
    with pytest.raises(SweepError, match="--gpus-per-trial 2: this machine has 1 GPU"):
        plan_sweep(SweepRequest(search=["lr=choice:0.1,0.01"], sets=["epochs=3", "device=auto"], gpus_per_trial=2),
                   tmp_path / "runs", tmp_path / "data")


def test_a_pruned_trial_is_not_resumed_from_step_0(tmp_path, capsys):
    """Its last.pt was pruned: resuming would start it again and cut its metrics; branching from best.pt is the way."""
    from helpers import fake_finished_run

    run = fake_finished_run(tmp_path / "runs")
    run.write_status(state="stopped", pruned={"last.pt": {"time": 0, "bytes": 6_700_000, "why": "not among the best"}})
    before = run.metrics_path.read_bytes()
    code = main(["train", "--runs-dir", str(tmp_path / "runs"), "--resume", run.id])
    err = capsys.readouterr().err
    assert code == 2 and "pruned" in err and f"--from {run.id}:best" in err, err
    assert run.metrics_path.read_bytes() == before


def test_a_failure_on_a_cluster_whose_head_is_gone_reads_as_lost(tmp_path):
    """Whatever Ray's error says, a head that no longer answers makes the sweep resumable (`interrupted`)."""
    from dataclasses import replace

    from brnn_core.sweep.runner import head_lost

    local = plan(tmp_path, "lr=grid:0.1,0.01")
    assert head_lost(local, RuntimeError("GCS has gone away"))
    assert not head_lost(local, ValueError("a bug in a trial"))
    gone = replace(local, address=f"127.0.0.1:{closed_port()}")
    assert head_lost(gone, RuntimeError("RaySystemError: something else"))


def test_pbt_perturbations_stay_inside_the_searched_and_the_config_range():
    from brnn_core.sweep.steering import Clamp  # imports ray

    base = TrainConfig().to_dict()
    specs = [parse_spec("lr", "loguniform:0.001:0.01", base), parse_spec("grad_clip", "uniform:0:20", base),
             parse_spec("seed", "randint:0:9", base), parse_spec("optimizer", "choice:adam,sgd", base)]
    clamp = Clamp.for_specs(specs)
    assert clamp({"lr": 0.012, "grad_clip": -1.0, "seed": 11.4, "optimizer": "sgd"}) == \
        {"lr": 0.01, "grad_clip": 0.0, "seed": 9, "optimizer": "sgd"}  # x1.2 of the top, x0.8 below the bottom
    assert clamp({"lr": 0.005, "seed": 3}) == {"lr": 0.005, "seed": 3}  # inside: untouched
    wide = Clamp.for_specs([parse_spec("lr", "loguniform:0.0000001:10", base)])
    assert wide({"lr": 12.0})["lr"] == 10.0  # TrainConfig's own limit is the outer bound


@pytest.mark.parametrize(("args", "words"), [
    (["--search-alg", "tpe", "--scheduler", "pbt", "--search", "lr=loguniform:0.001:0.01"], "PBT brings its own"),
    (["--search-alg", "tpe", "--search", "lr=grid:0.01,0.001"], "cannot take grid specs (lr)"),
])
def test_tpe_refuses_what_it_cannot_search(tmp_path, capsys, args, words):
    code = main(["sweep", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), *args])
    assert code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_tpe_plan_is_recorded(tmp_path):
    plan = plan_sweep(SweepRequest(search=["lr=loguniform:0.001:0.01"], search_alg="tpe", trials=4, scheduler="asha",
                                   sets=["epochs=2"]), tmp_path / "runs", tmp_path / "data")
    assert plan.search_alg == "tpe" and plan.to_dict()["search_alg"] == "tpe"


@pytest.mark.parametrize(("args", "words"), [
    (["--grace-period", "2"], "only apply to --scheduler asha"),
    (["--scheduler", "asha", "--grace-period", "3"], "--grace-period 3: between 1 and epochs - 1 (2)"),
    (["--scheduler", "asha", "--reduction-factor", "1"], "--reduction-factor 1: at least 2"),
    (["--time-budget", "0"], "--time-budget 0: minutes above 0"),
])
def test_budget_options_are_checked_before_ray(tmp_path, capsys, args, words):
    code = main(["sweep", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
                 "--set", "epochs=3", "--search", "lr=choice:0.01,0.001", *args])
    assert code == 2 and words in capsys.readouterr().err


def test_asha_options_reach_the_plan(tmp_path):
    plan = plan_sweep(SweepRequest(search=["lr=choice:0.01,0.001"], scheduler="asha", sets=["epochs=4"],
                                   grace_period=2, reduction_factor=3, time_budget_min=1.5),
                      tmp_path / "runs", tmp_path / "data")
    assert (plan.grace_period, plan.reduction_factor, plan.time_budget_s) == (2, 3, 90.0)


def test_leaderboard_ranks_from_results_alone():
    """The driver's ranking comes from Tune's results in memory: the same work at trial 200 as at trial 10."""
    from brnn_core.sweep.records import Leaderboard

    board = Leaderboard("val_loss")
    assert board.best() is None
    assert board.add("s-t00", 0.9, 1) and not board.add("s-t01", 1.2, 1)  # only a new best says so
    assert board.add("s-t01", 0.5, 2)
    assert not board.add("s-t00", 0.95, 2)  # worse than its own best: kept at 0.9
    assert board.ranking() == ["s-t01", "s-t00"]
    assert board.best() == {"run_id": "s-t01", "metric": "val_loss", "value": 0.5, "epoch": 2.0}
    assert not board.add("s-t00", 0.7, 3)  # its own best improves, the sweep's does not
    assert board.add("s-t01", 0.4, 3) and board.best()["value"] == 0.4  # the leader improving is a new best
    assert board.scores["s-t00"] == (0.7, 3.0)
    acc = Leaderboard("val_accuracy")
    acc.add("s-t00", 0.9, 1)
    acc.add("s-t01", 0.95, 1)
    assert acc.ranking() == ["s-t01", "s-t00"]


def test_a_trial_whose_worker_starts_after_the_budget_stop_went_out_is_sent_it_too(tmp_path):
    """Tune launched t01 before the time budget ran out, but its worker says it trains only after the stop went to
    the trials then training: the callback sends it the same stop at a later step, and nobody gets it twice."""
    import json
    import os
    import socket
    import time

    import psutil

    from brnn_core.sweep.records import Sweep, create_trial_run, sweeps_dir
    from brnn_core.sweep.steering import SweepCallback, SweepControl  # imports ray

    sweep = Sweep(sweeps_dir(tmp_path / "runs") / "s1")
    sweep.path.mkdir(parents=True)
    first, late = (create_trial_run(sweep.runs_dir, tmp_path, "s1", t, BASE, {}, "fifo", "val_loss")
                   for t in ("a_00000", "a_00001"))
    sweep.write(id="s1", trials=[first.id, late.id])
    me = {"pid": os.getpid(), "pid_started": psutil.Process().create_time(), "host": socket.gethostname()}
    first.write_status(state="running", **me)
    late.write_status(state="stopped", message="stopped at step 9, checkpoint saved")  # its earlier worker's end
    callback = SweepCallback(SweepControl(sweep.path), time_budget_s=12.0, printer=lambda line: None)
    callback.setup()
    callback.deadline = time.time() - 1  # the budget ran out

    def stops(run) -> list[dict]:
        lines = run.control_path.read_text().splitlines() if run.control_path.is_file() else []
        return [json.loads(line) for line in lines]

    callback.on_step_begin(0, [])
    assert sweep.stop_source() == "budget"
    assert [c["source"] for c in stops(first)] == ["budget"] and stops(late) == []
    late.write_status(state="loading", message="starting", **me)  # train_run_dir's first write
    callback.on_step_begin(1, [])
    callback.on_step_begin(2, [])
    [sent] = stops(late)
    assert sent["cmd"] == "stop" and "time budget of 0.2 min ran out" in sent["reason"], sent
    assert len(stops(first)) == 1


def test_a_starting_checkpoint_is_checked_once_before_any_trial(tmp_path):
    """init_from fixes the architecture and classes: a search over them, or a file that does not fit the base
    config, is refused by the plan, not by every trial's worker."""
    from brnn_core.checkpoint import save_checkpoint
    from brnn_core.model import ModelConfig, RecurrentClassifier

    ckpt = tmp_path / "start.pt"
    save_checkpoint(ckpt, RecurrentClassifier(ModelConfig(hidden_size=8, num_layers=1, input_scale="standard")),
                    classes=[str(i) for i in range(10)],
                    step=0, epoch=0)
    fits = ["epochs=3", "device=cpu", "hidden_size=8", "num_layers=1", f"init_from={ckpt}"]
    request = SweepRequest(search=["lr=choice:0.1,0.01"], sets=fits)
    assert plan_sweep(request, tmp_path / "runs", tmp_path / "data").base["init_from"] == str(ckpt)
    with pytest.raises(SweepError, match="of hidden 8, 1 layer .*set cell=lstm bidirectional=true hidden_size=8"):
        plan_sweep(SweepRequest(search=["lr=choice:0.1,0.01"], sets=fits[:2] + fits[4:]), tmp_path / "runs",
                   tmp_path / "data")
    with pytest.raises(SweepError, match="--search hidden_size with init_from"):
        plan_sweep(SweepRequest(search=["hidden_size=choice:8,16"], sets=fits), tmp_path / "runs", tmp_path / "data")
    for search in ("cell=choice:lstm,gru,rnn", "bidirectional=choice:true,false"):  # the weights fix these too
        with pytest.raises(SweepError, match=f"--search {search.partition('=')[0]} with init_from: every trial starts "
                                             "from that checkpoint"):
            plan_sweep(SweepRequest(search=[search], sets=fits), tmp_path / "runs", tmp_path / "data")
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_tune_logs_a_traceback_only_for_a_failure_no_line_of_ours_reported():
    """A stopped trial (TrialStopped) and a node without the shared folders (SweepError) each get one line from the
    sweep's callback, so Tune's traceback for them and its closing "Trials did not complete" are dropped, as is its
    traceback for deleting an old checkpoint that is already gone; any other failure keeps its traceback. Through
    Tune's own loggers, with the exceptions as Ray hands them to Tune."""
    import logging
    import logging.handlers
    import os
    from unittest import mock

    from ray.exceptions import RayTaskError  # Ray loads for this test alone: the others here stay Ray-free

    from brnn_core.sweep.runner import prepare_env

    with mock.patch.dict(os.environ):  # the Ray settings it also makes stay out of this worker's later tests
        prepare_env(None)
    controller, tune_log = logging.getLogger("ray.tune.execution.tune_controller"), logging.getLogger("ray.tune.tune")
    # on the loggers themselves: Ray's "ray" logger does not hand records on to the root's handlers; a capacity
    # far above the few records here, as a full BufferingHandler empties itself
    kept = logging.handlers.BufferingHandler(capacity=100)
    causes = {"stopped": TrialStopped("t00 stopped at step 80"), "no folder": SweepError("node n does not see it"),
              "a bug": ValueError("boom")}
    for logger in (controller, tune_log):
        logger.addHandler(kept)
    try:
        for name, cause in causes.items():
            error = RayTaskError("train", "Traceback (most recent call last): ...", cause).as_instanceof_cause()
            controller.error(f"Trial task failed for trial {name}", exc_info=error)
        tune_log.error("Trials did not complete: %s", ["t00", "t01"])
        # PBT's save of a checkpoint just reported: Tune deletes it twice once old; a checkpoint it cannot delete
        # for another reason keeps its traceback
        for name, error in {"gone": FileNotFoundError("Path not found"), "locked": PermissionError("denied")}.items():
            controller.error("Trial %s: Error handling checkpoint %s", name, "checkpoint_000001", exc_info=error)
    finally:
        for logger in (controller, tune_log):
            logger.removeHandler(kept)
    assert [r.getMessage() for r in kept.buffer] == ["Trial task failed for trial a bug",
                                                     "Trial locked: Error handling checkpoint checkpoint_000001"]
    assert kept.buffer[0].exc_info[1].cause.args == ("boom",)
