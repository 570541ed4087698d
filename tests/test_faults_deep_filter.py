"""A filter nested past any a person writes (180 parentheses, 1,000 `not`s) is refused with what is too deep: the
parser never reaches Python's recursion limit. `runs list/prune/export --filter` exit 2, the Runs page shows the
message inline and lists every run."""

from __future__ import annotations

import pytest
from helpers import copy_run, no_exception, open_page

from brnn_core import cli
from brnn_core.runs.filter import MAX_DEPTH, FilterError, parse_filter

PARENS = "(" * 180 + "lr > 0" + ")" * 180
NOTS = "not " * 1000 + "lr > 0"
SAYS = f"nested too deep: more than {MAX_DEPTH} parentheses and 'not's inside one another"


@pytest.mark.parametrize("text", [PARENS, NOTS, "not (" * 120 + "lr > 0" + ")" * 120])
def test_a_deep_filter_is_refused_with_what_is_too_deep(text):
    with pytest.raises(FilterError, match=SAYS) as caught:
        parse_filter(text)
    assert len(str(caught.value)) < 500  # the bad part is shown, not all of a long filter


def test_nesting_up_to_the_limit_still_works():
    row = {"lr": 0.01}
    assert parse_filter("(" * MAX_DEPTH + "lr > 0" + ")" * MAX_DEPTH)(row) is True
    assert parse_filter("not " * MAX_DEPTH + "lr > 0")(row) is True  # an even number of nots
    assert parse_filter("not " * (MAX_DEPTH - 1) + "lr > 0")(row) is False


@pytest.mark.parametrize("command", [["runs", "list"], ["runs", "prune", "--keep-best", "1"],
                                     ["runs", "export", "--out", "out.csv"]])
def test_the_cli_exits_2_naming_what_is_too_deep(tmp_path, finished, capsys, command):
    runs_dir = tmp_path / "runs"
    copy_run(finished, runs_dir)
    command = [str(tmp_path / part) if part == "out.csv" else part for part in command]
    for text in (PARENS, NOTS):
        assert cli.main([*command, "--runs-dir", str(runs_dir), "--filter", text]) == 2
        err = capsys.readouterr().err
        assert "the filter does not parse: " + SAYS in err and "Traceback" not in err, err
    assert not (tmp_path / "out.csv").exists()


def test_the_runs_page_shows_it_inline(dirs, finished):
    runs_dir, _ = dirs
    copy_run(finished, runs_dir)
    at = open_page("pages/runs.py", "Runs")
    for text in (PARENS, NOTS):
        at.text_input(key="runs_filter").input(text).run()
        no_exception(at)
        assert any(SAYS in e.value for e in at.error), [e.value for e in at.error]
        assert len(at.dataframe(key="runs_table").value) == 1  # a filter that does not parse lists every run
