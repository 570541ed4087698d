"""`python -m brnn_core compare`: a cell x direction matrix of seed groups, trained for real (tiny nets, one epoch,
in this process through the CLI) and reported; a rerun trains only what is missing; csv and json parse; every bad
argument exits 2 naming the fix; which run stands for a seed (runs.matrix) on run folders in each state."""

from __future__ import annotations

import io
import json
import os
import re

import pandas as pd
import psutil
import pytest
from helpers import TINY, assert_bad_input, kill_workers, make_run

from brnn_core.runs.index import RunIndex
from brnn_core.runs.matrix import Entry, Matrix, parameter_count, standing
from brnn_core.runs.rundir import delete_run, list_runs

# one epoch of a 4-unit one-layer net on mnist (the sample written as IDX: loads in milliseconds), no pen strokes
SHARED = {"hidden_size": 4, "num_layers": 1, "epochs": 1, "batch_size": 512, "eval_batch_size": 500,
          "drawn_share": 0.0}
SETS = [a for k, v in SHARED.items() for a in ("--set", f"{k}={v}")]
MATRIX = ["compare", "--cells", "lstm,rnn", "--directions", "bi,uni", "--seeds", "0", *SETS]


def test_compare_trains_the_matrix_then_reports_it_and_trains_only_a_missing_seed(brnn, tmp_path, idx_data):
    runs_dir = tmp_path / "runs"
    first = brnn(MATRIX, runs_dir, idx_data)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "training 4 runs one after another" in first.stdout
    runs = list_runs(runs_dir)
    assert sorted((r.config()["train"]["cell"], r.config()["train"]["bidirectional"]) for r in runs) == \
        [("lstm", False), ("lstm", True), ("rnn", False), ("rnn", True)]
    assert {r.status()["state"] for r in runs} == {"finished"}
    table = RunIndex(runs_dir).table().set_index("run_id")
    rows = re.findall(r"^\s*(lstm|rnn)\s+(two-way|one-way)\s+1\s+([\d.]+)\s+([\d.]+)\s+([\d,]+)\s+([\d.]+)\s+"
                      r"1 finished\s+([0-9a-f]{8})$", first.stdout, re.M)
    assert len(rows) == 4, first.stdout
    for cell, direction, best_val, test, params, _, group in rows:  # the table's numbers are the runs'
        (run_id,) = table.index[table["group"] == group]
        assert float(best_val) == pytest.approx(100 * table.loc[run_id, "best_val_acc"], abs=0.005)
        assert float(test) == pytest.approx(100 * table.loc[run_id, "test_acc"], abs=0.005)
        assert (table.loc[run_id, "cell"], table.loc[run_id, "bidirectional"]) == (cell, direction == "two-way")
        model_params = sum(t.numel() for t in __import__("torch").load(
            runs_dir / run_id / "checkpoints" / "best.pt", weights_only=True)["model_state"].values())
        assert int(params.replace(",", "")) == model_params

    again = brnn([*MATRIX, "--format", "json"], runs_dir, idx_data)  # nothing trains: the groups are reported
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(list_runs(runs_dir)) == 4 and "training" not in again.stderr
    records = json.loads(again.stdout)
    assert [(r["cell"], r["direction"], r["n"]) for r in records] == \
        [("lstm", "two-way", 1), ("lstm", "one-way", 1), ("rnn", "two-way", 1), ("rnn", "one-way", 1)]
    for record in records:
        (run_id,) = record["run_ids"]
        assert record["best_val_acc"] == pytest.approx(table.loc[run_id, "best_val_acc"])
        assert record["best_val_acc_std"] is None and record["drawings_acc"] is None  # one seed; no drawings
        assert record["s_per_epoch"] > 0

    gone = records[2]["run_ids"][0]  # the rnn two-way seed, removed: only it trains again
    delete_run(runs_dir, gone)
    third = brnn([*MATRIX, "--format", "csv"], runs_dir, idx_data)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "training 1 run one after another" in third.stderr  # progress on stderr, the table alone on stdout
    frame = pd.read_csv(io.StringIO(third.stdout))
    assert list(frame["n"]) == [1, 1, 1, 1] and list(frame["states"]) == ["1 finished"] * 4
    new = [r for r in list_runs(runs_dir) if r.id not in {rec["run_ids"][0] for rec in records}]
    assert [(r.config()["train"]["cell"], r.config()["train"]["bidirectional"]) for r in new] == [("rnn", True)]
    assert frame.loc[2, "run_ids"] == new[0].id


@pytest.mark.parametrize(("args", "needles"), [
    (["--cells", "lstm,lsmt"], ["--cells: unknown 'lsmt'", "lstm, gru, rnn"]),
    (["--directions", "bi,sideways"], ["--directions: unknown 'sideways'", "bi, uni"]),
    (["--cells", ""], ["--cells is empty: name one or more of lstm, gru, rnn"]),
    (["--directions", "bi,,uni"], ["an empty name between commas"]),
    (["--cells", "gru,gru"], ["gru is given twice"]),
    (["--cells", "gru", "--directions", "uni"], ["nothing to compare: GRU one-way is one entry",
                                                 "two or more cells, or both directions"]),
    (["--set", "cell=gru"], ["cell: the matrix sets it for each run", "--cells"]),
    (["--set", "bidirectional=false", "--set", "seed=3"], ["bidirectional, seed: the matrix sets them",
                                                           "--directions", "--seeds"]),
    (["--seeds", "0,x"], ["--seeds 0,x: 'x' is not a seed"]),
    (["--set", "head=bidir"], ["head: bidir reads the backward direction"]),  # the one-way entries cannot
])
def test_bad_compare_arguments_exit_2_naming_the_fix(brnn, runs_dir, data_dir, args, needles):
    result = brnn(["compare", *args], runs_dir, data_dir)
    assert_bad_input(result, *needles)
    assert not runs_dir.exists() or not list(runs_dir.iterdir())  # nothing created


def test_a_seed_stands_for_its_newest_done_run_else_its_active_one_else_it_is_trained(runs_dir):
    matrix = Matrix.build({**TINY, "epochs": 1}, ["lstm", "gru"], [True], [0, 1, 2])
    lstm, gru = Entry("lstm", True), Entry("gru", True)
    made = {}
    for name, entry, seed, state in [("lstm0-finished", lstm, 0, "finished"), ("lstm0-failed", lstm, 0, "failed"),
                                     ("lstm1-stopped", lstm, 1, "stopped"), ("gru0-queued", gru, 0, "queued"),
                                     ("gru1-diverged", gru, 1, "diverged"), ("lstm9-other", lstm, 9, "finished")]:
        run = make_run(runs_dir, base=TINY, epochs=1, cell=entry.cell, seed=seed)
        run.write_status(state=state, pid=os.getpid(), pid_started=psutil.Process().create_time())  # alive
        made[name] = run.id
    make_run(runs_dir, base=TINY, epochs=2, seed=2)  # another setting: another matrix
    now = standing(RunIndex(runs_dir), matrix)
    by = {(p.entry.cell, p.seed): p for p in now.places}
    assert by["lstm", 0].run_id == made["lstm0-finished"] and by["lstm", 0].done  # the failed one is newer
    assert by["lstm", 1].state == "stopped" and by["lstm", 1].missing
    assert by["lstm", 2].run_id is None and by["lstm", 2].missing
    assert by["gru", 0].active and not by["gru", 0].missing  # waited for, never doubled
    assert by["gru", 1].done  # a diverged seed is a result
    assert [(c.cell, c.seed) for c in now.missing()] == [("lstm", 1), ("lstm", 2), ("gru", 2)]
    summary = now.summary().set_index("cell")
    assert summary.loc["lstm", "n"] == 1 and summary.loc["lstm", "states"] == "1 finished · 1 stopped · 1 to train"
    assert summary.loc["gru", "states"] == "1 queued · 1 diverged · 1 to train"
    assert summary.loc["gru", "params"] == parameter_count(matrix.bases[gru]) == 3 * 8 * (28 + 8 + 2) * 2 + 16 * 10 + 10


@pytest.mark.worker
def test_no_wait_queues_the_missing_runs_as_workers_and_prints_the_table_as_it_stands(brnn, dirs, idx_data):
    runs_dir, _ = dirs
    try:
        result = brnn([*MATRIX, "--cells", "gru", "--no-wait"], runs_dir, idx_data)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "queued 2 runs as background workers" in result.stdout
        assert len(re.findall(r"^\s*gru\s+(two|one)-way\s+0\s.*1 (queued|loading|running)", result.stdout,
                              re.M)) == 2, result.stdout
        assert all(r.status().get("pid") for r in list_runs(runs_dir))  # each has its worker
    finally:
        kill_workers(runs_dir)
