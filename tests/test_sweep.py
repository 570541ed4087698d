"""Sweeps end to end: real Ray Tune, real (tiny) training, trials that are ordinary run directories.

Each test runs `python -m brnn_core sweep` as a user would (embedded Ray on 127.0.0.1, or a head the
test starts itself) and checks the records: sweep.json, each trial's config/status/metrics/events,
what ASHA and PBT did and why, what was pruned, and that no Ray process outlives the sweep.
"""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import pytest
from helpers import wait_for as poll
from sweep_helpers import (
    TINY,
    Descendants,
    finish,
    run_sweep,
    sweep_process,
    the_sweep,
    trial_runs,
    val_rows,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from brnn_core.config import TrainConfig
from brnn_core.runs.index import RunIndex
from brnn_core.runs.rundir import Run
from brnn_core.schedule import lr_at
from brnn_core.states import State
from brnn_core.sweep.records import trials_table

pytestmark = [pytest.mark.slow, pytest.mark.worker]


def epochs_done(runs_dir: Path) -> list[int]:
    """Validation rows so far of each trial run in runs_dir."""
    return [len(val_rows(Run(p))) for p in sorted(runs_dir.glob("*-t0*")) if (p / "config.json").is_file()]


def no_ray_left(watch: Descendants) -> None:
    assert watch.seen, "the sweep started no Ray processes?"
    poll(lambda: not watch.alive(), 90, f"Ray processes {watch.alive()} to end after the sweep")


def test_fifo_sweep_records_trials_as_runs_and_prunes_last_pt(runs_dir, data_dir, tmp_path, monkeypatch):
    cache = tmp_path / "fresh-cache"  # no training digits drawn as canvas strokes yet
    monkeypatch.setenv("BRNN_CACHE_DIR", str(cache))
    code, out, watch = run_sweep([*TINY, "--set", "epochs=2", "--search", "lr=grid:0.01,0.003,0.001",
                                  "--concurrency", "2", "--keep-best", "1", "--name", "fifo test"],
                                 runs_dir, data_dir, tmp_path / "sweep.log")
    assert code == 0, out
    # the driver drew them once, before any trial started; the trials read its cache file
    assert out.count("drawing 1,404 training digits as canvas strokes, once for this dataset: 0/") == 1, out
    [drawn] = cache.glob("as-drawn-v*.npy")
    sweep = the_sweep(runs_dir)
    info = sweep.info()
    assert "fifo-test" in sweep.id and info["name"] == "fifo test"
    assert (info["state"], info["address"], info["scheduler"], info["metric"]) == ("finished", "local", "fifo",
                                                                                  "val_loss")
    assert info["search"]["lr"]["values"] == [0.01, 0.003, 0.001]
    trials = trial_runs(sweep)
    assert sorted(trials) == ["t00", "t01", "t02"] and info["trials"] == sorted(r.id for r in trials.values())
    lowest = {}
    for number, run in trials.items():
        cfg, status, val = run.config(), run.status(), val_rows(run)
        assert cfg["sweep_id"] == sweep.id and cfg["sweep"]["trial"] == int(number[1:])
        assert cfg["sweep"]["searched"]["lr"] == cfg["train"]["lr"] and cfg["train"]["cpu_threads"] == 1
        assert status["state"] == "finished" and list(val["epoch"]) == [1, 2], status
        assert run.best_ckpt.is_file()
        lowest[run.id] = float(val["loss"].min())
    best = min(lowest, key=lowest.get)
    assert info["best"]["run_id"] == best and info["best"]["value"] == pytest.approx(lowest[best])
    # the winner's settings as a config file `train --config` takes
    best_cfg = TrainConfig.from_file(sweep.path / "best-config.json")
    assert best_cfg.lr == Run(runs_dir / best).config()["train"]["lr"] and best_cfg.best_by == "val_loss"
    # disk: the best trial keeps last.pt, the two others were pruned and say so
    for run in trials.values():
        status = run.status()
        if run.id == best:
            assert run.last_ckpt.is_file() and "pruned" not in status
        else:
            assert not run.last_ckpt.is_file() and status["pruned"]["last.pt"]["bytes"] > 0
            assert "last.pt was removed" in status["message"]
            assert any(e["kind"] == "pruned" for e in run.events())
    assert info["pruned"]["last.pt"] == 2
    assert sorted(trials_table(sweep)["last.pt"]) == ["kept", "pruned", "pruned"]
    assert all(c.path.is_file() for c in RunIndex(runs_dir).checkpoint_choices())
    # two at a time: some trials trained side by side
    spans = sorted((r.status()["started"], r.status()["ended"]) for r in trials.values())
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False)), spans
    # one drawing of the digits, beside it only its lock file and the driver's predrawn marker
    assert drawn.stat().st_mtime < spans[0][0]
    assert sorted(p.suffix for p in cache.iterdir()) == [".done", ".lock", ".npy"]
    assert all(r.config()["drawn_share"] == 0.3 for r in trials.values())
    no_ray_left(watch)


def test_asha_stops_the_bad_trial_with_the_rung_cut_off(runs_dir, data_dir, tmp_path):
    """One at a time, the good lr first: the bad one (lr 1e-5) meets rung 1 with the good one's value as cut-off."""
    code, out, watch = run_sweep([*TINY, "--set", "epochs=3", "--search", "lr=grid:0.01,0.00001",
                                  "--scheduler", "asha", "--concurrency", "1"], runs_dir, data_dir,
                                 tmp_path / "sweep.log")
    assert code == 0, out
    trials = trial_runs(the_sweep(runs_dir))
    good, bad = trials["t00"], trials["t01"]
    assert good.status()["state"] == "finished" and len(val_rows(good)) == 3
    status = bad.status()
    assert status["state"] == State.STOPPED and status["stopped_by"] == "asha", status
    cut_off = float(val_rows(good)["loss"][0])  # the only value at rung 1 when the bad trial got there
    mine = float(val_rows(bad)["loss"][0])
    assert mine > cut_off and len(val_rows(bad)) == 1
    message = status["message"]
    assert "stopped early by ASHA at epoch 1" in message, message
    assert f"val_loss {mine:.4f} is above the cut-off {cut_off:.4f}" in message, message
    stopped = [e for e in bad.events() if e["kind"] == "stopped"]
    assert stopped and stopped[-1]["source"] == "asha"
    assert bad.last_ckpt.is_file()  # --keep-best 3 (default) keeps both of two trials' last.pt
    no_ray_left(watch)


PBT_EPOCHS = 8  # the good trial trains on for several epochs after the weak one is let go (hold_for_a_donor)


def hold_for_a_donor(runs_dir: Path, proc) -> None:
    """Hold the grid's two trials so that the weak one (t01) reports while the good one (t00) can be copied.

    PBT copies from a trial that has not ended and has saved at a perturbation point, which it does only at a
    report once both trials have one. On two busy cores either trial may start so late that the other trains all
    its epochs first. So t01 is paused at its first epoch; t00 is paused at its first only while t01 has none (no
    save is pending then: a paused trial's save would hold Tune up), and let go once t01 has; t01 is let go once
    t00 has reported after t01's epoch, with most of its epochs still to train."""
    def trial(n: str) -> Run | None:
        found = [Run(p) for p in runs_dir.glob(f"*-{n}") if (p / "config.json").is_file()]
        return found[0] if found else None

    paused: set[str] = set()

    def both_scored() -> bool:
        good, weak = trial("t00"), trial("t01")
        weak_rows = len(val_rows(weak)) if weak else 0
        if weak_rows and "t01" not in paused:
            weak.send_command("pause")
            paused.add("t01")
        if good and not weak_rows and "t00" not in paused and len(val_rows(good)):
            good.send_command("pause")
            paused.add("t00")
        return proc.poll() is not None or "t01" in paused

    poll(both_scored, 600, "the weak trial's first epoch", 0.2)
    good, weak = trial("t00"), trial("t01")
    if "t00" in paused:
        good.send_command("resume")
    seen = len(val_rows(good))
    poll(lambda: proc.poll() is not None or len(val_rows(good)) > seen, 600, "the good trial's next epoch", 0.2)
    weak.send_command("resume")


def test_pbt_exploit_is_a_logged_live_change(runs_dir, data_dir, tmp_path):
    """The weak trial (lr 1e-5) copies the good one's weights and a perturbed lr, logged as a live change."""
    log = tmp_path / "sweep.log"
    with sweep_process([*TINY, "--set", f"epochs={PBT_EPOCHS}", "--search", "lr=grid:0.01,0.00001", "--scheduler",
                        "pbt", "--perturbation-interval", "1", "--concurrency", "2"], runs_dir, data_dir, log) as proc:
        watch = Descendants.watching(proc.pid)
        hold_for_a_donor(runs_dir, proc)
        code, out = finish(proc, log)
    watch.done.set()
    assert code == 0, out
    assert "Traceback" not in out, out  # a pause, an exploit and PBT's saves are no errors
    trials = trial_runs(the_sweep(runs_dir))
    good, weak = trials["t00"], trials["t01"]
    changes = [e for e in weak.events() if e["kind"] == "set" and e.get("source") == "pbt"]
    assert changes, f"no PBT exploit in {weak.id}:\n{out}"
    donor_ends = set(val_rows(good)["step"].astype(int))
    for change in changes:
        assert change["field"] == "lr" and change["donor"] == good.id, change
        assert change["step"] == change["donor_step"] and change["donor_step"] in donor_ends, change
        assert math.isfinite(change["old"]) and math.isfinite(change["new"])
    assert changes[0]["old"] == pytest.approx(1e-5)  # the trial's own lr before its first exploit
    assert any(e["kind"] == "pbt" and e["donor"] == good.id for e in weak.events())
    # metrics.csv: each training row carries the schedule's lr at its step, scaled by the peak of the latest change
    # before it (the trial's own lr before the first one): PBT sets the peak like a live change. A restart at the
    # donor's step drops the rows logged after it, so this holds for the file as it ends up.
    train = weak.metrics()
    train = train[train["split"] == "train"]
    total = PBT_EPOCHS * weak.status()["steps_per_epoch"]
    peak = [next((c["new"] for c in reversed(changes) if c["step"] < step), 1e-5) for step in train["step"]]
    expected = [lr_at("cosine", p, int(step) - 1, total) for p, step in zip(peak, train["step"], strict=True)]
    assert list(train["lr"]) == pytest.approx(expected, rel=1e-5)
    assert (train["step"] > changes[0]["step"]).any(), "no training row after the first exploit"
    final = total  # the end of the last epoch: no exploit there (nothing left to train), no restart
    assert all(c["step"] < final for c in changes), changes
    assert not [e for e in weak.events() if e["kind"] in ("pbt", "resume") and (e.get("step") or 0) >= final]
    steps = weak.metrics()[["step", "split"]]
    assert not steps.duplicated().any()  # a restart from the donor's step drops the rows logged after it
    # and so do its TensorBoard files: each restart's file purged the steps after the one it restarted from
    events = EventAccumulator(str(weak.path), size_guidance={"scalars": 0})
    events.Reload()
    mirrored = events.Scalars("train/lr")
    assert [e.step for e in mirrored] == list(train["step"])
    assert [e.value for e in mirrored] == pytest.approx(list(train["lr"]), rel=1e-6)
    assert weak.status()["state"] == good.status()["state"] == "finished"
    no_ray_left(watch)


def test_tpe_sweep_picks_each_trial_from_the_results_so_far(runs_dir, data_dir, tmp_path):
    code, out, watch = run_sweep([*TINY, "--set", "epochs=2", "--search", "lr=loguniform:0.001:0.03", "--search-alg",
                                  "tpe", "--trials", "3", "--scheduler", "asha", "--concurrency", "1"],
                                 runs_dir, data_dir, tmp_path / "sweep.log")
    assert code == 0, out
    sweep = the_sweep(runs_dir)
    assert sweep.info()["plan"]["search_alg"] == "tpe"
    assert all(r.config()["train"]["best_by"] == "val_loss" for r in sweep.trial_runs())
    lrs = [r.config()["train"]["lr"] for r in sweep.trial_runs()]
    assert len(lrs) == 3 and all(0.001 <= lr <= 0.03 for lr in lrs) and len(set(lrs)) == 3
    no_ray_left(watch)


# more than a trial trains in the three parts that pause it: past epoch 1, then twice past where it stopped, each
# time with an epoch or two more before the pause reaches it; so every part finds every trial part-way
BUDGET_EPOCHS = 12


def pause_once_past(runs_dir: Path, proc, epochs: dict[str, int]) -> None:
    """Pause each trial as soon as it has trained past `epochs[its id]` (0 for one not listed), and return once both
    trials (each caller's grid has two) are sent the pause or the sweep has ended.

    A paused trial waits for the time budget without training: the budget then ends trials that are part-way
    however fast or busy the machine is (only Ray's start-up is spent before the first epoch)."""
    paused: set[str] = set()

    def all_paused() -> bool:
        for path in runs_dir.glob("*-t0*"):
            run = Run(path)
            if path.name not in paused and (path / "config.json").is_file() \
                    and len(val_rows(run)) > epochs.get(run.id, 0):
                run.send_command("pause")
                paused.add(path.name)
        return proc.poll() is not None or len(paused) == 2

    poll(all_paused, 600, "both trials to train an epoch", 0.2)


def budget_sweep(args: list[str], runs_dir: Path, data_dir: Path, log: Path, epochs: dict[str, int]):
    with sweep_process(args, runs_dir, data_dir, log) as proc:
        pause_once_past(runs_dir, proc, epochs)
        return finish(proc, log)


def test_time_budgets_and_a_killed_driver_leave_trials_part_way_and_resume_finishes_them(runs_dir, data_dir, tmp_path):
    """One sweep through every way a sweep ends part-way: its time budget (stopped, last.pt kept), a budget of the
    continued part's own, a driver killed (SIGKILL) while its trials wait (interrupted: Ray ends with it), and a last
    `--resume` that restores Tune's experiment and trains every trial to its end."""
    # each trial is paused once it has trained an epoch: the budget then finds it part-way, paused, on any machine
    code, out = budget_sweep([*TINY, "--set", f"epochs={BUDGET_EPOCHS}", "--search", "lr=grid:0.01,0.003",
                              "--concurrency", "2", "--time-budget", "1"], runs_dir, data_dir, tmp_path / "sweep.log",
                             {})
    assert code == 0, out
    sweep = the_sweep(runs_dir)
    assert sweep.info()["state"] == "stopped" and "time budget reached" in out, out
    stopped = [r for r in sweep.trial_runs() if r.status()["state"] == "stopped"]
    assert stopped and len(stopped) == len(sweep.trial_runs()), [r.status() for r in sweep.trial_runs()]
    for run in stopped:
        status = run.status()
        assert run.last_ckpt.is_file() and "time budget of 1 min ran out" in status["message"], status
        assert 1 <= len(val_rows(run)) < BUDGET_EPOCHS, status
    stopped_at = {run.id: len(val_rows(run)) for run in stopped}
    # a budget of its own for the continued part (counted from Tune's restore): it stops again, with that budget
    # named. A trial still restoring when it runs out does not start.
    code, out = budget_sweep(["--resume", sweep.id, "--time-budget", "0.5"], runs_dir, data_dir,
                             tmp_path / "resume-budget.log", stopped_at)
    assert code == 0, out
    info = sweep.info()
    assert info["state"] == "stopped" and info["resume_budget_s"] == pytest.approx(30.0), out
    assert "time budget 0.5 min" in out and "time budget reached" in out, out
    for run in sweep.trial_runs():
        status = run.status()
        assert status["state"] == "stopped" and run.last_ckpt.is_file(), status
        assert "0.5 min ran out" in status["message"] or len(val_rows(run)) == stopped_at[run.id], status
        assert len(val_rows(run)) < BUDGET_EPOCHS, status
    stopped_at = {run.id: len(val_rows(run)) for run in sweep.trial_runs()}
    # a plain --resume whose driver dies (SIGKILL) once both trials trained on and were paused: the sweep reads
    # `interrupted`, and nothing of its embedded Ray is left (Ray's reaper)
    log = tmp_path / "killed.log"
    with sweep_process(["--resume", sweep.id], runs_dir, data_dir, log) as proc:
        killed = Descendants.watching(proc.pid)
        pause_once_past(runs_dir, proc, stopped_at)
        poll(lambda: all(r.status()["state"] == State.PAUSED for r in sweep.trial_runs()), 600, "both trials paused",
             0.5, proc=proc, log=log)
        assert sweep.info()["resume_budget_s"] is None  # a resume without a budget has none
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    killed.done.set()
    no_ray_left(killed)
    assert sweep.info()["state"] == "interrupted" and "--resume" in sweep.info()["message"]
    poll(lambda: all(r.status()["state"] == "interrupted" for r in sweep.trial_runs()), 120,
         "the trials to read as interrupted (their Ray workers end with the driver)")
    code, out, watch = run_sweep(["--resume", sweep.id], runs_dir, data_dir, tmp_path / "resume.log")
    assert code == 0, out
    info = sweep.info()
    assert info["state"] == "finished" and len(info["resumed"]) == 3 and info["resume_budget_s"] is None
    for run in sweep.trial_runs():  # every trial trained on from its last.pt to the end
        assert run.status()["state"] == "finished" and list(val_rows(run)["epoch"]) == list(range(1, BUDGET_EPOCHS + 1))
        assert not run.metrics()[["step", "split"]].duplicated().any()
        kinds = [e["kind"] for e in run.events()]
        assert "pause" in kinds, kinds
    no_ray_left(watch)


def test_ctrl_c_stops_every_trial_with_last_pt(runs_dir, data_dir, tmp_path):
    log = tmp_path / "sweep.log"
    with sweep_process([*TINY, "--set", "epochs=6", "--search", "lr=grid:0.01,0.003,0.001", "--concurrency", "2"],
                       runs_dir, data_dir, log) as proc:
        watch = Descendants.watching(proc.pid)
        poll(lambda: any(epochs_done(runs_dir)), 600, "a first epoch", 0.5, proc=proc, log=log)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group, Ray's processes too
        code, out = finish(proc, log)
    watch.done.set()
    assert code == 0, out
    # a stop is no error: one line per trial says it, and the driver's `trials:` line counts them
    assert "Trial task failed" not in out and "Trials did not complete" not in out, out
    sweep = the_sweep(runs_dir)
    assert sweep.info()["state"] == "stopped", sweep.info()
    trials = trial_runs(sweep)
    assert len(trials) == 2, f"a trial started after the stop: {sorted(trials)}"
    for run in trials.values():
        status = run.status()
        assert status["state"] == "stopped" and run.last_ckpt.is_file() and not status.get("stopped_by"), status
    no_ray_left(watch)


def test_pause_stop_and_kill_trials_then_resume_finishes_them(runs_dir, data_dir, tmp_path):
    """The Train page's buttons on trials, and a trial whose process dies: t00 paused while the sweep goes on, t01
    stopped (last.pt kept), t02 (in the slot t01 freed) killed: it ends interrupted, the sweep finishes, and
    `sweep --resume` trains both on to their end."""
    import psutil

    log = tmp_path / "sweep.log"
    # 12 epochs: on an idle machine t00 trained 4 epochs before the pause sent after its first step arrived
    with sweep_process([*TINY, "--set", "epochs=12", "--search", "lr=grid:0.01,0.003,0.001", "--concurrency", "2"],
                       runs_dir, data_dir, log) as proc:
        runs = poll(lambda: (r := {p.name[-3:]: Run(p) for p in runs_dir.glob("*-t0[01]")}) and len(r) == 2
                    and all(x.status().get("step") for x in r.values()) and r, 600, "t00 and t01 to train", 0.5,
                    proc=proc, log=log)
        runs["t00"].send_command("pause")
        runs["t01"].send_command("stop")
        paused = poll(lambda: (s := runs["t00"].status())["state"] == State.PAUSED and s, 600, "t00 paused", 0.5,
                      proc=proc, log=log)
        poll(lambda: runs["t01"].status()["state"] == State.STOPPED, 600, "t01 stopped", 0.5, proc=proc, log=log)
        t02 = poll(lambda: next((Run(p) for p in runs_dir.glob("*-t02") if Run(p).status().get("step")), None),
                   600, "t02 to take the freed slot and train", 0.5, proc=proc, log=log)
        assert runs["t00"].status()["step"] == paused["step"]  # paused while t02 trains
        psutil.Process(t02.status()["pid"]).kill()
        poll(lambda: t02.status()["state"] == State.INTERRUPTED, 600, "the killed t02 recorded interrupted", 0.5,
             proc=proc, log=log)
        runs["t00"].send_command("resume")
        code, out = finish(proc, log)
    assert code == 0, out
    kinds = [e["kind"] for e in runs["t00"].events()]
    assert "pause" in kinds and "resume" in kinds and runs["t00"].status()["state"] == "finished"
    stopped = runs["t01"].status()
    assert stopped["state"] == "stopped" and not stopped.get("stopped_by") and runs["t01"].last_ckpt.is_file()
    assert any(e["kind"] == "error" and "process" in e["message"] for e in t02.events())
    sweep = the_sweep(runs_dir)
    assert sweep.info()["state"] == "finished"
    # --resume trains every trial that did not finish on to its end, from its last.pt when it has one: the killed
    # one and the stopped one
    code, out, watch = run_sweep(["--resume", sweep.id], runs_dir, data_dir, tmp_path / "resume.log")
    assert code == 0, out
    for run in (t02, runs["t01"]):
        assert run.status()["state"] == "finished" and list(val_rows(run)["epoch"]) == list(range(1, 13))
        assert not run.metrics()[["step", "split"]].duplicated().any()
        assert any(e["kind"] == "resume" for e in run.events())
    no_ray_left(watch)


TUNE_ERROR = """Failure # 1 (occurred at 2026-12-01_20-36-48)
\x1b[36mray::ImplicitFunc.train()\x1b[39m (pid=561, ip=127.0.0.1, actor_id=edc1, repr=train_trial)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/brnn_core/sweep/cluster.py", line 108, in require_shared
    raise SweepError(f"node {socket.gethostname()} does not see the sweep folder {sweep_dir}: its records would "
brnn_core.sweep.space.SweepError: node worker3 does not see the sweep folder /srv/runs/sweeps/s1: its records \
would stay on that machine. Fix: use NFS
"""


def test_a_trial_that_failed_before_making_its_run_is_recorded_failed_by_the_driver(runs_dir, data_dir, tmp_path):
    """What the driver does for a trial on a node without the shared runs folder (the namespace test in
    test_cluster.py runs that for real): its own run directory here, `failed`, the exception's message."""
    from types import SimpleNamespace

    from brnn_core.sweep.records import Sweep, sweeps_dir
    from brnn_core.sweep.steering import error_line, record_lost_trial

    error = tmp_path / "error.txt"
    error.write_text(TUNE_ERROR)
    said = ("node worker3 does not see the sweep folder /srv/runs/sweeps/s1: its records would stay on that "
            "machine. Fix: use NFS")
    assert error_line(str(error)) == said
    assert error_line(str(tmp_path / "gone.txt")) == str(tmp_path / "gone.txt")  # unreadable: the path itself
    folder = sweeps_dir(runs_dir) / "20261201-203621-sweep-e8ce"
    folder.mkdir(parents=True)
    sweep = Sweep(folder)
    sweep.write(id=sweep.id, base=TrainConfig(epochs=3, hidden_size=8).to_dict(), search={"lr": {}},
                scheduler="asha", metric="val_accuracy", data_dir=str(data_dir))
    record_lost_trial(sweep, SimpleNamespace(trial_id="e1b8f_00005", config={"lr": 0.003}), str(error))
    run = Run(runs_dir / f"{sweep.id}-t05")
    status, config = run.status(), run.config()
    assert (status["state"], status["message"]) == ("failed", said)
    assert config["train"]["lr"] == 0.003 and config["train"]["hidden_size"] == 8
    assert config["sweep_id"] == sweep.id and config["sweep"]["trial"] == 5 and config["sweep"]["metric"] == \
        "val_accuracy"
