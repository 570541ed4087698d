"""Paths the user names: lr-find's curve and summary never share a file, an --out that cannot be written is refused
(exit 2, naming it) before any work, and an OSError's message names the path that failed with the fix for that
place (the --out, the runs folder, the data folder), not always "make the runs folder writable"."""

from __future__ import annotations

import errno
import json

import pytest
from helpers import copy_run

from brnn_core import cli

TINY_LR_FIND = ["--set", "dataset=mnist-sample", "--set", "hidden_size=8", "--set", "num_layers=1",
                "--set", "batch_size=64", "--set", "device=cpu"]


@pytest.fixture
def a_file(tmp_path):
    """A plain file, so that any path through it (a_file/x.csv) cannot be created, as root too."""
    path = tmp_path / "not-a-folder"
    path.write_text("a file")
    return path


def test_lr_find_refuses_an_out_its_summary_would_overwrite(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert cli.main(["lr-find", "--out", str(out), *TINY_LR_FIND]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: the curve is written as CSV and its summary beside it as c.json" in err, err
    assert "name the curve c.csv" in err and not out.exists()


@pytest.mark.parametrize("where", ["through-a-file", "a-folder"])
def test_an_out_that_cannot_be_written_is_refused_before_the_work(tmp_path, a_file, capsys, where):
    out = a_file / "c.csv" if where == "through-a-file" else tmp_path / "c.csv"
    if where == "a-folder":
        out.mkdir()
    says = f"{a_file} is not a folder" if where == "through-a-file" else f"{out} is a folder"
    for command in (["lr-find", "--out", str(out), *TINY_LR_FIND],
                    ["runs", "export", "--out", str(out), "--runs-dir", str(tmp_path / "runs")]):
        assert cli.main(command) == 2, command
        said = capsys.readouterr()
        assert f"--out {out}: {says}; choose another --out" in said.err, said.err
        assert "steps, lr" not in said.out and "metrics rows" not in said.out  # nothing ran
    assert a_file.read_text() == "a file"


def test_lr_find_writes_the_curve_and_the_summary_apart(tmp_path, capsys):
    out = tmp_path / "c.csv"
    assert cli.main(["lr-find", "--out", str(out), "--steps", "10", *TINY_LR_FIND]) == 0
    said = capsys.readouterr().out
    assert f"curve: {out}, summary: {tmp_path / 'c.json'}" in said, said
    assert out.read_text().splitlines()[0] == "lr,loss,smoothed_loss" and len(out.read_text().splitlines()) == 11
    assert json.loads((tmp_path / "c.json").read_text())["steps"] == 10


def test_an_os_error_names_the_path_and_the_fix_for_that_place(tmp_path, a_file, finished, capsys):
    # the data folder: evaluate reads a dataset from a folder it cannot create
    data_dir = a_file / "data"
    rc = cli.main(["evaluate", str(finished.best_ckpt), "--dataset", "mnist", "--data-dir", str(data_dir)])
    err = capsys.readouterr().err
    assert rc == 1 and f"({data_dir}" in err and f"make the data folder ({data_dir}) readable" in err, err
    assert "runs folder" not in err
    # the runs folder: a new run in a runs folder that cannot be created
    runs_dir = a_file / "runs"
    rc = cli.main(["train", "--runs-dir", str(runs_dir), "--set", "hidden_size=8", "--set", "device=cpu"])
    err = capsys.readouterr().err
    assert rc == 1 and f"Not a directory ({runs_dir})" in err and f"make the runs folder writable ({runs_dir})" in err
    # an --out whose write fails after the check (the disk filled meanwhile): the --out is named, not the runs folder
    out = tmp_path / "export" / "all.csv"
    args = cli.build_parser().parse_args(["runs", "export", "--out", str(out), "--runs-dir", str(tmp_path / "runs")])
    said = cli.os_error_message(OSError(errno.EACCES, "Permission denied", str(out)), args)
    assert said == f"Permission denied ({out}): choose another --out, or make its folder writable"
    said = cli.os_error_message(OSError(errno.ENOSPC, "No space left on device", str(out)), args)
    assert said == f"No space left on device ({out}): free disk space on the disk that holds {out}"
    copy_run(finished, tmp_path / "runs")  # a real export there still works
    assert cli.main(["runs", "export", "--out", str(out), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert out.is_file()
