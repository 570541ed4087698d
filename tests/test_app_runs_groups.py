"""Runs page, headless (AppTest): a seed group of three real tiny runs is one row with mean ± std and n; selecting
it opens its runs under the table and overlays the group as a mean curve inside a ±1 std band."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from helpers import TINY, no_exception, open_page, train_run

from brnn_core.runs.index import RunIndex

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def seed_runs(tmp_path_factory):
    """Three 2-epoch tiny runs that differ only in seed, and one of another lr: (runs folder, group id, the lone
    run's id)."""
    root = tmp_path_factory.mktemp("seeds")
    for seed in SEEDS:
        run, state = train_run(root / "runs", root / "data", base=TINY, epochs=2, seed=seed)
        assert state == "finished", run.status()
    other, state = train_run(root / "runs", root / "data", base=TINY, epochs=2, lr=0.003)
    assert state == "finished", other.status()
    table = RunIndex(root / "runs").table()
    (group,) = table[table["run_id"] != other.id]["group"].unique()
    return root / "runs", group, other.id


@pytest.fixture
def page(seed_runs, monkeypatch):
    runs_dir = seed_runs[0]
    monkeypatch.setenv("BRNN_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("BRNN_DATA_DIR", str(runs_dir.parent / "data"))
    return open_page("pages/runs.py", "Runs")


def _decoded(value):
    """Plotly's JSON packs a number array as {"dtype", "bdata": base64}: as a numpy array again."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return value


def chart_traces(at, key: str) -> list[dict]:
    """The traces of the chart with this key, their x and y as numbers."""
    chart = next(c for c in at.get("plotly_chart") if c.key == key)
    return [{**t, "x": _decoded(t.get("x")), "y": _decoded(t.get("y"))} for t in json.loads(chart.proto.spec)["data"]]


def expected_spread(runs_dir, group: str, column: str) -> str:
    values = 100 * RunIndex(runs_dir).table().query("group == @group")[column].to_numpy(dtype=float)
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f}"


def test_a_seed_group_is_one_row_with_its_mean_std_and_n(seed_runs, page):
    runs_dir, group, other = seed_runs
    assert page.toggle(key="runs_group_seeds").value is True
    table = page.dataframe(key="runs_groups_table").value
    assert len(table) == 2
    row = table[table["group"] == group].iloc[0]
    assert row["run_id"] == f"group {group} · 3 runs" and row["n"] == 3 and row["state"] == "finished"
    assert row["best_val_acc"] == expected_spread(runs_dir, group, "best_val_acc")
    assert row["test_acc"] == expected_spread(runs_dir, group, "test_acc")
    assert " ± " in row["best_val_acc"] and not row["best_val_acc"].endswith("± 0.00")  # seeds really differ
    lone = table[table["run_id"] == other].iloc[0]
    assert lone["n"] == 1 and " ± " not in lone["test_acc"]
    # Nothing selected: the first rows are overlaid, the group as its band.
    names = [t["name"] for t in chart_traces(page, "cmp_train")]
    assert f"group {group} mean ± std (n=3)" in names and other in names
    assert any(f"showing group {group} (3 runs, mean ± std)" in c.value for c in page.caption)
    assert not [d for d in page.dataframe if d.key == f"group_runs_{group}"]  # opened only when selected


def test_selecting_the_group_opens_its_runs_and_overlays_its_band(seed_runs, page):
    runs_dir, group, other = seed_runs
    rows = list(page.dataframe(key="runs_groups_table").value["group"])
    page.session_state["runs_groups_table"] = {"selection": {"rows": [rows.index(group)], "columns": []}}
    page.run()
    no_exception(page)
    runs = page.dataframe(key=f"group_runs_{group}").value
    assert list(runs["seed"]) == list(SEEDS) and other not in set(runs["run_id"])
    assert any(m.value.startswith(f"**Seed group {group}** · 3 runs, seeds 0, 1, 2.") for m in page.markdown)
    for key, x in (("cmp_train", "step"), ("cmp_val", "epoch")):
        lower, upper, mean = chart_traces(page, key)  # the group alone: its band's two edges and its mean
        assert upper["fill"] == "tonexty" and upper["fillcolor"].startswith("rgba(") and "fill" not in lower, key
        assert lower["line"]["color"] == upper["line"]["color"] == mean["line"]["color"]
        spread = np.asarray(upper["y"]) - np.asarray(mean["y"])
        np.testing.assert_allclose(np.asarray(mean["y"]) - np.asarray(lower["y"]), spread)
        assert (spread > 0).any(), key  # three seeds do not train alike
        metrics = RunIndex(runs_dir).metrics(runs["run_id"].iloc[0])
        split = metrics[metrics["split"] == ("train" if key == "cmp_train" else "val")]
        assert list(mean["x"]) == list(split[x])  # same steps in every run of the group
    # a run of the opened group selected in its own table is overlaid beside the band
    seed1 = runs["run_id"].iloc[1]
    page.session_state[f"group_runs_{group}"] = {"selection": {"rows": [1], "columns": []}}
    page.run()
    no_exception(page)
    assert [t["name"] for t in chart_traces(page, "cmp_train")][-2:] == [f"group {group} mean ± std (n=3)", seed1]


def test_group_seeds_off_lists_every_run_and_a_filter_folds_what_it_keeps(seed_runs, page):
    runs_dir, group, other = seed_runs
    page.toggle(key="runs_group_seeds").set_value(False).run()
    no_exception(page)
    table = page.dataframe(key="runs_table").value
    assert len(table) == 4 and table["best_val_acc"].dtype.kind == "f"  # numbers again, one run a row
    assert not [d for d in page.dataframe if d.key == "runs_groups_table"]
    page.toggle(key="runs_group_seeds").set_value(True).run()
    page.text_input(key="runs_filter").input(f"group:{group}").run()
    assert list(page.dataframe(key="runs_groups_table").value["n"]) == [3]
    page.text_input(key="runs_filter").input("lr < 0.005").run()  # the lone run: nothing left to fold
    assert list(page.dataframe(key="runs_table").value["run_id"]) == [other]
    assert page.toggle(key="runs_group_seeds").disabled
