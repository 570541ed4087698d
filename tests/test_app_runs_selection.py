"""Runs page, headless (AppTest, a fresh session each): a ticked row follows its run, or its seed group, when new
runs arrive and push the rows down (the table is newest first), and the overlay keeps showing what was ticked."""

from __future__ import annotations

import json

from helpers import copies_with, copy_run, no_exception, open_page


def add_run(finished, runs_dir, run_id: str, **train) -> str:
    """A copy of the session's finished run under `run_id`, with these train settings changed."""
    run = copy_run(finished, runs_dir, run_id)
    config = json.loads(run.config_path.read_text())
    config["train"].update(train)
    run.config_path.write_text(json.dumps(config))
    return run_id


def ticked(page, key: str) -> list[str]:
    """The run_id cells of the ticked rows of the table with this key."""
    table = page.dataframe(key=key).value
    return [table["run_id"].iloc[k] for k in page.session_state[key]["selection"]["rows"]]


def showing(page) -> str:
    return next(c.value for c in page.caption if "showing" in c.value)


def overlaid(page) -> list[str]:
    chart = next(c for c in page.get("plotly_chart") if c.key == "cmp_train")
    return [t["name"] for t in json.loads(chart.proto.spec)["data"]]


def test_a_ticked_run_stays_ticked_when_newer_runs_arrive(dirs, finished):
    runs_dir, _ = dirs
    copies_with(finished, runs_dir, "a", [{"lr": 0.01}, {"lr": 0.02}])  # ...-a00 (older), ...-a01
    older = "20000101-000000-mnist-sample-a00"
    page = open_page("pages/runs.py", "Runs")
    assert list(page.dataframe(key="runs_table").value["run_id"]) == ["20000102-000000-mnist-sample-a01", older]
    page.session_state["runs_table"] = {"selection": {"rows": [1], "columns": []}}  # the user ticks the older run
    page.run()
    assert ticked(page, "runs_table") == [older] and overlaid(page) == [older]
    # a branch, a queued run: newer runs arrive at the top of the table, the next rerun lists them
    add_run(finished, runs_dir, "20000103-000000-mnist-sample-b00", lr=0.03)
    add_run(finished, runs_dir, "20000104-000000-mnist-sample-b01", lr=0.04)
    page.run()
    no_exception(page)
    assert ticked(page, "runs_table") == [older]
    assert overlaid(page) == [older] and f"showing {older}." in showing(page)
    page.run()  # and on the reruns after
    assert ticked(page, "runs_table") == [older] and overlaid(page) == [older]
    # the user's next change is read in the table as it was drawn
    page.session_state["runs_table"] = {"selection": {"rows": [0, 3], "columns": []}}
    page.run()
    assert ticked(page, "runs_table") == ["20000104-000000-mnist-sample-b01", older]


def test_a_ticked_seed_group_stays_ticked_as_seeds_and_runs_arrive(dirs, finished):
    runs_dir, _ = dirs
    copies_with(finished, runs_dir, "g", [{"seed": 1}, {"seed": 2}])  # one seed group of two runs (the older)
    add_run(finished, runs_dir, "20000105-000000-mnist-sample-s00", lr=0.02)  # a run of its own (the newest)
    page = open_page("pages/runs.py", "Runs")
    table = page.dataframe(key="runs_groups_table").value
    group = table["group"].iloc[1]
    assert list(table["n"]) == [1, 2]
    page.session_state["runs_groups_table"] = {"selection": {"rows": [1], "columns": []}}
    page.run()
    assert ticked(page, "runs_groups_table") == [f"group {group} · 2 runs"]
    assert f"showing group {group} (2 runs, mean ± std)." in showing(page)
    add_run(finished, runs_dir, "20000106-000000-mnist-sample-s01", lr=0.03)  # another lone run on top
    page.run()
    no_exception(page)
    assert ticked(page, "runs_groups_table") == [f"group {group} · 2 runs"]
    assert f"showing group {group} (2 runs, mean ± std)." in showing(page)
    # a new seed of the group: the group's row moves to the top (its newest run) and stays ticked, with n=3
    add_run(finished, runs_dir, "20000107-000000-mnist-sample-g03", seed=0)
    page.run()
    assert ticked(page, "runs_groups_table") == [f"group {group} · 3 runs"]
    assert f"showing group {group} (3 runs, mean ± std)." in showing(page)
    # the group's own table (by seed): a ticked seed stays ticked when a seed that sorts before it arrives
    page.session_state[f"group_runs_{group}"] = {"selection": {"rows": [2], "columns": []}}  # seed 2
    page.run()
    seed2 = "20000102-000000-mnist-sample-g01"
    assert ticked(page, f"group_runs_{group}") == [seed2] and overlaid(page)[-1] == seed2
    add_run(finished, runs_dir, "20000108-000000-mnist-sample-g04", seed=-1)
    page.run()
    assert ticked(page, f"group_runs_{group}") == [seed2] and overlaid(page)[-1] == seed2
    # seeds not grouped: a ticked group does not tick its runs one by one; grouped again, it is still ticked
    page.toggle(key="runs_group_seeds").set_value(False).run()
    assert ticked(page, "runs_table") == []
    page.toggle(key="runs_group_seeds").set_value(True).run()
    assert ticked(page, "runs_groups_table") == [f"group {group} · 4 runs"]


def test_a_ticked_run_that_gains_a_seed_stays_overlaid_inside_its_group(dirs, finished):
    runs_dir, _ = dirs
    lone = add_run(finished, runs_dir, "20000101-000000-mnist-sample-r00", lr=0.02, seed=1)
    add_run(finished, runs_dir, "20000102-000000-mnist-sample-r01", lr=0.03)
    page = open_page("pages/runs.py", "Runs")
    page.session_state["runs_table"] = {"selection": {"rows": [1], "columns": []}}
    page.run()
    assert ticked(page, "runs_table") == [lone]
    add_run(finished, runs_dir, "20000103-000000-mnist-sample-r02", lr=0.02, seed=2)  # a second seed of it
    page.run()
    no_exception(page)
    table = page.dataframe(key="runs_groups_table").value  # now there is a group to fold: seeds grouped
    group = table[table["n"] == 2]["group"].iloc[0]
    assert ticked(page, "runs_groups_table") == [f"group {group} · 2 runs"]
    assert f"showing group {group} (2 runs, mean ± std)." in showing(page)
