"""One damaged file in one run never hides the others: config.json, status.json, report.json, events.jsonl and
metrics.csv holding JSON of the wrong shape or NUL bytes read as damaged (or as what is left), in the run index,
read_run, and on the Runs and Train pages."""

from __future__ import annotations

import pytest
from helpers import copy_run, walk_runs_and_train_pages

from brnn_core.runs.index import RunIndex, read_run
from brnn_core.training.reports import read_report

GOOD = "20000101-000000-mnist-sample-aaaa"
DAMAGE = {
    "config-train-null": ("config.json", b'{"train": null, "dataset": "mnist-sample"}'),
    "config-a-list": ("config.json", b"[1, 2]"),
    "config-nul-bytes": ("config.json", b"\0" * 200),
    "status-a-list": ("status.json", b"[1, 2]"),
    "report-a-list": ("report.json", b"[]"),
    "report-empty": ("report.json", b"{}"),
    "events-a-list": ("events.jsonl", b"[1]\n42\nnull\n"),
}


def damaged_runs(runs_dir, finished) -> list[str]:
    copy_run(finished, runs_dir, GOOD)
    ids = []
    for k, (name, (file, blob)) in enumerate(DAMAGE.items()):
        run = copy_run(finished, runs_dir, f"2000010{2 + k // 10}-00000{k % 10}-mnist-sample-{name[:4]}{k}")
        (run.path / file).write_bytes(blob)
        ids.append(run.id)
    return ids


@pytest.mark.parametrize("case", list(DAMAGE))
def test_one_damaged_file_leaves_the_listing_whole(tmp_path, finished, case):
    file, blob = DAMAGE[case]
    runs_dir = tmp_path / "runs"
    copy_run(finished, runs_dir, GOOD)
    bad = copy_run(finished, runs_dir, "20000102-000000-mnist-sample-bbbb")
    (bad.path / file).write_bytes(blob)
    table = RunIndex(runs_dir).table()
    assert set(table["run_id"]) == {GOOD, bad.id}
    notes = dict(zip(table["run_id"], table["problem"], strict=True))
    assert notes[GOOD] is None or notes[GOOD] != notes[GOOD]  # None or NaN: no note
    if file in ("config.json", "status.json"):  # the run says what is wrong with it
        assert file in notes[bad.id], notes
    data = read_run(bad.path)  # the Runs page's one-run view
    assert data is not None
    assert isinstance(bad.config(), dict) and all(isinstance(e, dict) for e in bad.events())
    report = read_report(bad)
    assert report is None or isinstance(report, dict)


def test_the_runs_and_train_pages_show_every_run_beside_damaged_ones(dirs, finished):
    runs_dir, _ = dirs
    walk_runs_and_train_pages({GOOD, *damaged_runs(runs_dir, finished)})
