"""Seed groups and export (brnn_core.runs.export): runs that differ only in seed share a group, `runs list
--groups` gives their mean and std, `runs export` writes one long table to CSV or Parquet that pandas reads
back, and the Runs page offers the same download."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import copies_with, no_exception, open_page

from brnn_core.runs.filter import filter_table
from brnn_core.runs.index import RunIndex


@pytest.fixture
def seeds(tmp_path, finished):
    """Three copies of a run as seeds 0, 1, 2 of one config, and one of another lr."""
    return copies_with(finished, tmp_path / "runs", "cc", [{"seed": seed, "lr": lr} for seed, lr in
                                                           [(0, 0.01), (1, 0.01), (2, 0.01), (0, 0.003)]])


def test_runs_that_differ_only_in_seed_share_a_group(brnn, seeds, tmp_path):
    table = RunIndex(seeds).table()
    groups = table.groupby("group")["run_id"].count().sort_values()
    assert list(groups) == [1, 3]
    group = groups.index[-1]
    assert len(filter_table(table, f"group:{group}")) == 3
    out = brnn(["runs", "list", "--groups", "--format", "json", "--runs-dir", seeds], seeds, tmp_path / "data")
    assert out.returncode == 0, out.stderr
    rows = {r["group"]: r for r in json.loads(out.stdout)}
    three = rows[group]
    assert three["n"] == 3 and len(three["runs"].split()) == 3
    accs = table[table["group"] == group]["best_val_acc"]
    assert three["best_val_acc_mean"] == pytest.approx(accs.mean())
    assert three["best_val_acc_std"] == pytest.approx(accs.std(ddof=1), abs=1e-12)
    assert rows[groups.index[0]]["best_val_acc_std"] is None  # one run: no spread


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_export_writes_one_long_table_pandas_reads_back(brnn, seeds, tmp_path, suffix):
    out_file = tmp_path / f"runs{suffix}"
    out = brnn(["runs", "export", "--out", out_file, "--filter", "lr >= 0.01", "--runs-dir", seeds], seeds,
               tmp_path / "data")
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(out_file) if suffix == ".csv" else pd.read_parquet(out_file)
    assert frame["run_id"].nunique() == 3 and set(frame["train.lr"]) == {0.01}
    assert {"step", "split", "loss", "accuracy", "group", "tags", "train.seed"} <= set(frame.columns)
    assert len(frame) == 3 * len(frame[frame["run_id"] == frame["run_id"].iloc[0]])  # each copy's whole metrics
    bad = brnn(["runs", "export", "--out", tmp_path / "runs.xlsx", "--runs-dir", seeds], seeds, tmp_path / "data")
    assert bad.returncode == 2 and ".csv or .parquet" in bad.stderr


def test_the_runs_page_exports_the_rows_shown(seeds, monkeypatch):
    monkeypatch.setenv("BRNN_RUNS_DIR", str(seeds))
    monkeypatch.setenv("BRNN_DATA_DIR", str(seeds.parent / "data"))
    at = open_page("pages/runs.py", "Runs")
    at.text_input(key="runs_filter").input("lr < 0.005").run()
    next(b for b in at.button if b.label.startswith("Export 1 run")).click().run()
    no_exception(at)
    csv = at.session_state["runs_export"].decode()
    assert csv.splitlines()[0].startswith("run_id,group,tags,state") and "cc03" in csv and "cc00" not in csv
