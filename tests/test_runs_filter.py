"""The runs filter (brnn_core.runs.filter): the expression language, its errors, text that tries to run code,
and the same filter on a real runs folder through `runs list` and the Runs page."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers import copies_with, no_exception, open_page, run_cli

from brnn_core.runs.filter import FilterError, filter_table, parse_filter
from brnn_core.runs.index import RunIndex

ROW = {"run_id": "r1", "state": "finished", "dataset": "mnist-sample", "hidden": 64, "lr": 0.003,
       "best_val_acc": 0.975, "test_acc": None, "tags": ["baseline", "long"], "group": "g1"}


@pytest.mark.parametrize("text, expected", [
    ("", True),
    ("val_accuracy > 0.97", True),
    ("val_accuracy > 0.97 and lr <= 0.01 and tag:baseline", True),
    ("hidden >= 128 or state:finished", True),
    ("not state:failed and dataset == mnist-sample", True),
    ("(hidden < 32 or lr > 0.01) and tag:long", False),
    ("test_acc > 0", False),  # a run without the value never matches
    ("test_acc != 0.5", False),
    ("group:g1 and not tag:short", True),
    ("dataset == 'mnist-sample' and lr = 0.003", True),
    ("NOT (tag:baseline) OR hidden_size == 64", True),
])
def test_expressions(text, expected):
    assert parse_filter(text)(ROW) is expected


@pytest.mark.parametrize("text, expected", [
    ("val_acc > 97", True),  # percent, as the Runs page shows it (97.50)
    ("val_acc > 97%", True),
    ("val_acc > 0.97", True),  # a fraction, as runs list and metrics.csv hold it
    ("val_acc > 98", False),
    ("val_accuracy >= 97.5 and val_accuracy <= 97.5%", True),
    ("val_acc >= 1", False),  # 1 is a fraction: a perfect run
    ("val_acc < 100", True),
    ("not val_acc > 99.9", True),
])
def test_accuracies_are_read_as_the_table_shows_them(text, expected):
    assert parse_filter(text)(ROW) is expected


@pytest.mark.parametrize("text, where", [
    ("val_acc > 150", 11),
    ("val_acc > 100%", 11),
    ("test_acc > 1", 12),  # a fraction above 1
    ("val_accuracy < 0", 16),
    ("lr > 0.01 and test_acc == 101", 27),
])
def test_an_accuracy_no_run_can_have_is_refused_naming_the_unit(text, where):
    with pytest.raises(FilterError) as caught:
        parse_filter(text)
    message = str(caught.value)
    assert "can match no run: accuracies run from 0 to 100 % (or 0 to 1)" in message, message
    assert f"at position {where}:" in message, message


def test_a_percent_sign_is_for_accuracies_only():
    with pytest.raises(FilterError, match="a value in % is for accuracies"):
        parse_filter("lr > 5%")


@pytest.mark.parametrize("text, where, says", [
    ("val_accuracy > > 0.97", 16, "expected a value"),
    ("lr <= 0.01 and", 15, "expected a field"),
    ("(lr > 0.01", 11, "expected ')'"),
    ("lr 0.01", 4, "expected a comparison"),
    ("colour:red", 1, "unknown 'colour:red'"),
    ("lr > 0.01 hidden > 3", 11, "expected 'and', 'or' or the end"),
    ("__import__('os').system('touch /tmp/pwned')", 1, "unknown field '__import__'"),
    ("lr > 0.01; import os", 10, "unexpected ';'"),
    ("width > 3", 1, "unknown field 'width'"),
])
def test_bad_filters_point_at_the_bad_part(text, where, says):
    with pytest.raises(FilterError) as caught:
        parse_filter(text, {"lr", "hidden", "state", "best_val_acc"})
    message = str(caught.value)
    assert says in message and f"at position {where}:" in message, message
    assert message.splitlines()[-1] == "  " + " " * (where - 1) + "^"


@pytest.fixture
def three_runs(tmp_path, finished):
    return copies_with(finished, tmp_path / "runs", "aa", [{"lr": 0.01, "hidden_size": 16},
                                                           {"lr": 0.003, "hidden_size": 16},
                                                           {"lr": 0.001, "hidden_size": 64}])


def test_a_runs_folder_filtered(brnn, three_runs, tmp_path):
    table = RunIndex(three_runs).table()
    assert list(filter_table(table, "lr < 0.005 and hidden == 16")["run_id"]) == ["20000102-000000-mnist-sample-aa01"]
    assert len(filter_table(table, "state:finished")) == 3 and len(filter_table(table, "not state:finished")) == 0
    out = run_cli(["runs", "list", "--runs-dir", three_runs, "--filter", "lr <= 0.003", "--format", "csv"],
                  three_runs, tmp_path / "data")
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert sorted(float(r["lr"]) for r in rows) == [0.001, 0.003]
    out = brnn(["runs", "list", "--runs-dir", three_runs, "--format", "json"], three_runs, tmp_path / "data")
    assert [r["run_id"][-4:] for r in json.loads(out.stdout)] == ["aa02", "aa01", "aa00"]
    bad = brnn(["runs", "list", "--runs-dir", three_runs, "--filter", "lr >> 1"], three_runs, tmp_path / "data")
    assert bad.returncode == 2 and "does not parse" in bad.stderr and "^" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_runs_page_filter_box(three_runs, monkeypatch):
    monkeypatch.setenv("BRNN_RUNS_DIR", str(three_runs))
    monkeypatch.setenv("BRNN_DATA_DIR", str(three_runs.parent / "data"))
    at = open_page("pages/runs.py", "Runs")
    assert len(at.dataframe(key="runs_table").value) == 3
    at.text_input(key="runs_filter").input("hidden == 64").run()
    no_exception(at)
    assert list(at.dataframe(key="runs_table").value["hidden"]) == [64]
    at.text_input(key="runs_filter").input("__import__('os').system('id')").run()
    no_exception(at)
    assert any("does not parse" in e.value for e in at.error)
    assert len(at.dataframe(key="runs_table").value) == 3  # a bad filter lists every run
    at.text_input(key="runs_filter").input("lr > 1").run()
    assert any("No run matches" in i.value for i in at.info)


def test_the_runs_page_filter_takes_accuracies_as_the_table_shows_them(three_runs, monkeypatch):
    monkeypatch.setenv("BRNN_RUNS_DIR", str(three_runs))
    monkeypatch.setenv("BRNN_DATA_DIR", str(three_runs.parent / "data"))
    at = open_page("pages/runs.py", "Runs")
    shown = at.dataframe(key="runs_table").value["best_val_acc"]  # percent, e.g. 85.47
    assert (shown > 1).all()
    threshold = round(float(shown.min()) - 0.01, 2)  # a value read off the table: every run is above it
    at.text_input(key="runs_filter").input(f"val_acc > {threshold}").run()
    no_exception(at)
    assert len(at.dataframe(key="runs_table").value) == 3 and not at.error
    at.text_input(key="runs_filter").input(f"val_acc > {threshold / 100}").run()  # the same as a fraction
    assert len(at.dataframe(key="runs_table").value) == 3
    at.text_input(key="runs_filter").input("val_acc > 150").run()
    no_exception(at)
    assert any("val_acc > 150 can match no run" in e.value for e in at.error), [e.value for e in at.error]
