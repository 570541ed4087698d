"""Tags and notes of runs (brnn_core.runs.notes): the file, the CLI's `runs tag` / `runs note`, the filter's
tag:NAME, the runs table's columns and the Runs page's editor."""

from __future__ import annotations

import json

import pytest
from helpers import copy_run, no_exception, open_page, tree_digest

from brnn_core.runs.filter import filter_table
from brnn_core.runs.index import RunIndex
from brnn_core.runs.notes import NOTES_NAME, change_tags, read_notes, write_notes


def test_notes_round_trip_and_damage(tmp_path):
    assert read_notes(tmp_path) == read_notes(tmp_path / "missing")  # none: no tags, no note
    write_notes(tmp_path, tags=["baseline", " long ", "baseline", ""], note="lr 0.01 diverged at step 30; see ')")
    notes = read_notes(tmp_path)
    assert notes.tags == ("baseline", "long") and notes.note.endswith("see ')")
    assert change_tags(tmp_path, add=["best"], remove=["long"]).tags == ("baseline", "best")
    data = json.loads((tmp_path / NOTES_NAME).read_text())
    data["future"] = 1
    (tmp_path / NOTES_NAME).write_text(json.dumps(data))
    write_notes(tmp_path, note="")
    assert json.loads((tmp_path / NOTES_NAME).read_text())["future"] == 1  # unknown keys kept
    with pytest.raises(ValueError, match="is not a tag"):
        write_notes(tmp_path, tags=["two words"])
    with pytest.raises(ValueError, match="keep it under"):
        write_notes(tmp_path, note="x" * 20_000)
    (tmp_path / NOTES_NAME).write_text("[1, 2]")
    assert read_notes(tmp_path).tags == ()


@pytest.fixture
def two_runs(tmp_path, finished):
    runs_dir = tmp_path / "runs"
    return runs_dir, [copy_run(finished, runs_dir, f"2000010{k}-000000-mnist-sample-bb0{k}") for k in (1, 2)]


def test_the_cli_tags_and_notes_and_the_filter_finds_them(brnn, two_runs, tmp_path):
    runs_dir, (a, b) = two_runs
    data = tmp_path / "data"
    out = brnn(["runs", "tag", a.id, b.id, "--add", "baseline", "--runs-dir", runs_dir], runs_dir, data)
    assert out.returncode == 0, out.stderr
    out = brnn(["runs", "tag", b.id, "--add", "best", "--remove", "baseline", "--runs-dir", runs_dir],
               runs_dir, data)
    assert out.returncode == 0 and f"{b.id}: best" in out.stdout
    out = brnn(["runs", "note", a.id, "first try; $(rm -rf /) stays text", "--runs-dir", runs_dir], runs_dir, data)
    assert out.returncode == 0 and read_notes(a.path).note == "first try; $(rm -rf /) stays text"
    table = RunIndex(runs_dir).table()
    assert dict(zip(table["run_id"], table["tags"], strict=True)) == {a.id: "baseline", b.id: "best"}
    assert list(filter_table(table, "tag:baseline")["run_id"]) == [a.id]
    assert list(filter_table(table, "not tag:baseline and tag:best")["run_id"]) == [b.id]
    before = tree_digest(runs_dir)
    for bad in (["runs", "tag", a.id, "nope-run", "--add", "x"], ["runs", "tag", a.id, "--add", "a b"],
                ["runs", "tag", a.id]):
        out = brnn([*bad, "--runs-dir", runs_dir], runs_dir, data)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert tree_digest(runs_dir) == before  # nothing written by a refused command


def test_the_runs_page_edits_tags_and_the_note(two_runs, monkeypatch):
    runs_dir, (a, b) = two_runs
    monkeypatch.setenv("BRNN_RUNS_DIR", str(runs_dir))
    monkeypatch.setenv("BRNN_DATA_DIR", str(runs_dir.parent / "data"))
    at = open_page("pages/runs.py", "Runs")
    inspected = at.selectbox(key="inspect").value
    at.text_input(key=f"tags_{inspected}").input("baseline, long")
    at.text_area(key=f"note_{inspected}").input("the one to beat")
    next(x for x in at.button if x.label == "Save tags and note").click().run()
    no_exception(at)
    assert read_notes(runs_dir / inspected).tags == ("baseline", "long")
    at.text_input(key="runs_filter").input("tag:long").run()
    table = at.dataframe(key="runs_table").value
    assert list(table["run_id"]) == [inspected] and list(table["note"]) == ["the one to beat"]
    at.text_input(key=f"tags_{inspected}").input("not a tag!")
    next(x for x in at.button if x.label == "Save tags and note").click().run()
    assert any("is not a tag" in e.value for e in at.error)
    assert read_notes(runs_dir / inspected).tags == ("baseline", "long")  # nothing saved lost
