"""Seed groups folded into one row: the spread maths and which runs a folded row stands for (no Streamlit)."""

import math

import pandas as pd

from brnn_core.runs.export import group_summary
from brnn_core.runs.groups import fold_groups, has_groups, spread, unfolded


def test_spread_is_the_mean_and_sample_std_of_the_numbers_present():
    s = spread([97.0, 97.5, None, float("nan"), 98.0, ""])
    assert (s.mean, s.std, s.n) == (97.5, 0.5, 3)
    assert s.text() == "97.50 ± 0.50" and s.text(1) == "97.5 ± 0.5"
    one = spread([91.234])
    assert one.n == 1 and math.isnan(one.std) and one.text() == "91.23"  # one value: no ± at all
    assert spread([None, float("nan")]).text() == ""


def runs_table() -> pd.DataFrame:
    """Newest first: a seed group of three (g1, one still running), a run alone (g2), and two damaged runs that
    share a group id (their settings could not be read)."""
    rows = [("r5", "g1", "finished", 90.0, 1.0, "a", "", 100.0), ("r4", "g2", "finished", 80.0, 2.0, "", "", 50.0),
            ("r3", "g1", "running", 92.0, 3.0, "b,a", "", 100.0), ("r2", "g1", "finished", 94.0, 4.0, "", "", 99.0),
            ("r1", "gx", "failed", None, None, "", "config.json cannot be read", None),
            ("r0", "gx", "failed", None, None, "", "config.json cannot be read", None)]
    return pd.DataFrame(rows, columns=["run_id", "group", "state", "best_val_acc", "step", "tags", "problem",
                                       "size_mb"])


def test_a_group_of_seeds_is_one_row_where_its_newest_run_was():
    table = runs_table()
    assert has_groups(table) and not has_groups(table[table["group"] != "g1"])
    folded = fold_groups(table, ["best_val_acc"], totals=["size_mb"])
    assert folded.members == [("r5", "r3", "r2"), ("r4",), ("r1",), ("r0",)]  # damaged runs stay alone
    group, alone = folded.table.iloc[0], folded.table.iloc[1]
    assert group["run_id"] == "group g1 · 3 runs" and group["n"] == 3 and group["group"] == "g1"
    assert group["best_val_acc"] == "92.00 ± 2.00"
    assert group["state"] == "2 finished · 1 running"
    assert group["tags"] == "a,b"  # every tag of its runs
    assert group["step"] == 8 / 3  # a number that differs: the mean
    assert group["size_mb"] == 299.0  # a total: what the group's runs hold together
    assert alone["run_id"] == "r4" and alone["n"] == 1 and alone["best_val_acc"] == "80.00" and alone["step"] == 2
    assert list(folded.table.iloc[2:]["problem"]) == ["config.json cannot be read"] * 2


def test_the_selected_rows_are_groups_and_runs_and_none_selected_means_the_first_with_data():
    folded = fold_groups(runs_table(), ["best_val_acc"])
    assert folded.picked([1, 0], with_data={"r2", "r4"}) == (["r4"], {"g1": ("r5", "r3", "r2")})
    # nothing selected: the first rows with data, a group having data when any of its runs has
    assert folded.picked([], with_data={"r2", "r0"}) == (["r0"], {"g1": ("r5", "r3", "r2")})
    assert folded.picked([], with_data={"r4"}, default=1) == (["r4"], {})
    assert folded.picked([7], with_data={"r4"}) == (["r4"], {})  # a row the table no longer has: as none
    plain = unfolded(runs_table())
    assert plain.members[0] == ("r5",) and (plain.table["n"] == 1).all()
    assert plain.picked([0, 2], with_data=set()) == (["r5", "r3"], {})


def test_runs_list_groups_uses_the_same_spread():
    table = runs_table().assign(test_acc=[0.9, 0.8, 0.92, 0.94, None, None], dataset="d", hidden=8, lr=0.01)
    summary = group_summary(table).set_index("group")
    assert summary.loc["g1", "n"] == 3 and summary.loc["g1", "best_val_acc_mean"] == 92.0
    assert summary.loc["g1", "best_val_acc_std"] == spread([90.0, 92.0, 94.0]).std == 2.0
    assert math.isnan(summary.loc["g2", "best_val_acc_std"])
