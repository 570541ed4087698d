"""The Compare page, headless: a matrix already in the runs folder (copies of the session's trained run, each given
one entry's settings and a seed: seed groups without training) is offered under Settings; picking it fills the
fields and shows the CLI's table, each entry's bands, its gradient flow and its link to its group on Runs, which
that page opens filtered to the group; Start queues exactly the missing seed through the registry."""

from __future__ import annotations

import json

import pytest
from helpers import build_app, copy_run, no_exception

from brnn_core.config import resolve_head
from brnn_core.runs.index import RunIndex
from brnn_core.runs.matrix import MATRIX_FIELDS, Entry, Matrix
from brnn_core.runs.rundir import list_runs

CELLS, WAYS, SEEDS = ["lstm", "rnn"], [True, False], [0, 1]
SKIPPED = (Entry("rnn", False), 1)  # the one seed the folder lacks


def matrix_of_copies(finished, runs_dir) -> Matrix:
    """A copy of `finished` for every entry and seed of a 2 x 2 matrix on its settings, but SKIPPED."""
    train = finished.config()["train"]
    values = {k: v for k, v in train.items() if k not in MATRIX_FIELDS}
    values["head"] = "auto" if values["head"] == resolve_head("auto", True) else values["head"]
    matrix = Matrix.build(values, CELLS, WAYS, SEEDS)
    for e, entry in enumerate(matrix.entries):
        for cfg in matrix.configs(entry):
            if (entry, cfg.seed) == SKIPPED:
                continue
            copy = copy_run(finished, runs_dir, f"20000101-00000{e}-mnist-sample-c{e}s{cfg.seed}")
            config = copy.config()
            config["train"] = cfg.to_dict()
            copy.config_path.write_text(json.dumps(config))
    return matrix


def compare_page():
    at = build_app()
    at.run()
    at.switch_page("pages/compare.py").run()
    no_exception(at)
    return at


def pick_found(at):
    base = at.selectbox(key="cmp_base")
    (found,) = base.options[1:]
    assert found.startswith("LSTM, RNN × two-way, one-way · seeds 0, 1 · mnist-sample") and "(7 runs)" in found
    base.set_value(found).run()
    no_exception(at)
    return at


def test_a_matrix_in_the_folder_fills_the_table_bands_flow_and_links(dirs, finished):
    runs_dir, _ = dirs
    matrix = matrix_of_copies(finished, runs_dir)
    at = pick_found(compare_page())
    assert at.multiselect(key="cmp_cells").value == CELLS
    assert at.multiselect(key="cmp_directions").value == ["two-way", "one-way"]
    assert at.text_input(key="cmp_seeds").value == "0, 1" and at.number_input(key="cmp_epochs").value == 1
    table = at.dataframe[0].value
    assert list(zip(table["cell"], table["direction"], table["n"], strict=True)) == \
        [("lstm", "two-way", 2), ("lstm", "one-way", 2), ("rnn", "two-way", 2), ("rnn", "one-way", 1)]
    acc = 100 * RunIndex(runs_dir).table()["best_val_acc"].iloc[0]  # every copy has the same curves
    assert list(table["best val acc %"]) == [f"{acc:.2f} ± 0.00"] * 3 + [f"{acc:.2f}"]
    assert list(table["states"]) == ["2 finished"] * 3 + ["1 finished · 1 to train"]
    links = at.get("page_link")
    assert [link.proto.label for link in links] == [e.label for e in matrix.entries]
    assert [link.proto.query_string for link in links] == [f"group={matrix.groups[e]}" for e in matrix.entries]
    charts = {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}
    for key in ("cmp_band_train", "cmp_band_val"):  # each entry's mean, with a band where it has two runs
        names = [t.get("name", "") for t in charts[key]["data"]]
        assert sum("mean ± std (n=2)" in n for n in names) == 3 and sum("(n=1)" in n for n in names) == 1, names
    flow = charts["cmp_flow"]
    titles = [a["text"] for a in flow["layout"]["annotations"]]
    assert titles[:4] == ["LSTM two-way", "RNN two-way", "LSTM one-way", "RNN one-way"]
    drawn = {t["hovertemplate"].split("<extra>")[1].removesuffix("</extra>") for t in flow["data"]}
    assert drawn == {f"{e.label} · {d}" for e in matrix.entries for d in ("forward", "backward")}  # the copies' files
    assert at.button(key="cmp_start").label == "Start 1 run"


def test_an_entry_link_opens_its_group_on_the_runs_page(dirs, finished):
    runs_dir, _ = dirs
    matrix = matrix_of_copies(finished, runs_dir)
    group = matrix.groups[Entry("lstm", False)]
    at = build_app()
    at.run()
    at.query_params["group"] = group
    at.switch_page("pages/runs.py").run()
    no_exception(at)
    assert at.text_input(key="runs_filter").value == f"group:{group}"
    (row,) = at.dataframe(key="runs_groups_table").value["run_id"]
    assert row == f"group {group} · 2 runs"
    at.text_input(key="runs_filter").set_value("").run()  # the filter stays the user's
    assert len(at.dataframe(key="runs_groups_table").value) == 4


@pytest.mark.worker
def test_start_queues_only_the_missing_seed_through_the_registry(dirs, finished):
    runs_dir, _ = dirs
    matrix_of_copies(finished, runs_dir)
    at = pick_found(compare_page())
    before = {r.id for r in list_runs(runs_dir)}
    at.button(key="cmp_start").click().run()
    no_exception(at)
    assert any("Queued 1 run" in s.value for s in at.success), [s.value for s in at.success]
    (new,) = [r for r in list_runs(runs_dir) if r.id not in before]
    train = new.config()["train"]
    assert (train["cell"], train["bidirectional"], train["seed"]) == ("rnn", False, 1)
    assert new.status().get("pid")  # a worker of its own, as the Train page's Start gives
    assert at.button(key="cmp_start").label == "Nothing to start"
