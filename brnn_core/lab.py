"""`python -m brnn_core compare`: a cell × direction matrix of seed groups (runs.matrix), its missing runs trained in
turn in this process as `train --seeds` trains a group, then one row per entry: n, mean ± std of the best validation,
test and drawings accuracy, parameters, seconds per epoch. Rerun with the same arguments, it trains only the seeds
still missing and reports the rest. On top, beside cli.py: nothing below imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import pandas as pd

from brnn_core.config import train_values
from brnn_core.data.datasets import default_data_dir
from brnn_core.data.drawings import MIN_FOR_ACCURACY, drawing_count, folder_signature
from brnn_core.data.loading import ensure_dataset
from brnn_core.runs.index import RunIndex, update_store
from brnn_core.runs.jobs import JobRegistry, new_runs
from brnn_core.runs.matrix import DIRECTIONS, Matrix, MatrixError, Standing, cells_and_directions, shown, standing
from brnn_core.runs.rundir import Run, default_runs_dir
from brnn_core.runs.seeds import SeedsError, parse_seeds
from brnn_core.text import plural

FORMATS = ("table", "csv", "json")
WAIT_POLL_S = 2.0  # how often the runs queued or training elsewhere are looked at


def add_parser(sub) -> argparse.ArgumentParser:
    cmp = sub.add_parser("compare", help="a matrix of cells x directions, a seed group each, trained in turn; one "
                                          "row per entry: mean ± std of its accuracies, parameters, s/epoch")
    cmp.add_argument("--cells", default="lstm,gru,rnn", help="recurrent cells: lstm, gru, rnn (default all three)")
    cmp.add_argument("--directions", default="bi,uni",
                     help=f"{' and '.join(DIRECTIONS)}: read both ways (two-way) or top-down only (default both)")
    cmp.add_argument("--seeds", default="0,1,2", help="one run per seed in each entry (default 0,1,2)")
    cmp.add_argument("--config", help="JSON file of TrainConfig fields every run shares")
    cmp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a setting every run shares, e.g. --set epochs=5 (repeatable; not cell, bidirectional or "
                          "seed: the matrix sets those)")
    cmp.add_argument("--format", default="table", choices=FORMATS,
                     help="table (default), csv or json on stdout (progress then goes to stderr)")
    cmp.add_argument("--no-wait", action="store_true",
                     help="queue the missing runs as background workers (watch them on the Compare page) and print "
                          "the table as it stands now")
    cmp.add_argument("--runs-dir", type=Path, default=None, help="runs folder (default $BRNN_RUNS_DIR or ./runs)")
    cmp.add_argument("--data-dir", type=Path, default=None, help="datasets folder (default $BRNN_DATA_DIR or ./data)")
    cmp.set_defaults(func=cmd_compare)
    return cmp


def matrix_from_args(args, data_dir: Path) -> Matrix:
    """The matrix asked for, every argument checked before anything is created (MatrixError, ConfigError)."""
    cells, directions = cells_and_directions(args.cells, args.directions)
    try:
        seeds = parse_seeds(args.seeds)
    except SeedsError as exc:
        raise MatrixError(f"--seeds {args.seeds}: {exc}") from None
    return Matrix.build(train_values(args.config, args.set, data_dir), cells, directions, seeds)


def cmd_compare(args) -> int:
    data_dir = args.data_dir or default_data_dir()
    runs_dir = args.runs_dir or default_runs_dir()
    matrix = matrix_from_args(args, data_dir)
    ensure_dataset(next(iter(matrix.bases.values())).dataset, data_dir)  # offline and missing: exit 2 now
    # the table alone on stdout when it is for a program: progress and waiting go to stderr
    with contextlib.redirect_stdout(sys.stdout if args.format == "table" else sys.stderr):
        now = train_missing(matrix, runs_dir, data_dir, no_wait=args.no_wait)
    update_store(runs_dir)  # the dashboard's next start reads none of these runs again
    print(render(now.summary(drawing_scores(now, runs_dir, data_dir)), args.format), flush=True)
    complete = all(place.done for place in now.places)
    return 0 if complete or args.no_wait else 1


def train_missing(matrix: Matrix, runs_dir: Path, data_dir: Path, *, no_wait: bool) -> Standing:
    """Train (or with `no_wait` queue) every seed the runs folder does not have yet, wait for those queued or
    training elsewhere, and return where the matrix stands then."""
    from brnn_core.training.foreground import train_in_line  # torch: only when something trains

    index = RunIndex(runs_dir)
    now = standing(index, matrix)
    missing = now.missing()
    for entry in matrix.entries:
        done = sum(p.done for p in now.of(entry))
        print(f"{entry.label}: seed group {matrix.groups[entry]}, {done} of {plural(len(matrix.seeds), 'seed')} "
              "done" + (f", {sum(p.active for p in now.of(entry))} queued or training" if now.active() else ""),
              flush=True)
    if missing and no_wait:
        runs = JobRegistry().start_many(runs_dir, missing, data_dir=data_dir)
        print(f"queued {plural(len(runs), 'run')} as background workers: {', '.join(r.id for r in runs)}", flush=True)
        return standing(index, matrix)
    if missing:
        runs = new_runs(runs_dir, missing, data_dir)
        print(f"training {plural(len(runs), 'run')} one after another", flush=True)
        for run in runs:
            print(f"run directory: {run.path}", flush=True)
        states = train_in_line(runs, data_dir=data_dir)
        if len(states) < len(runs) or states[-1] == "interrupted":  # Ctrl-C: the table as it stands
            return standing(index, matrix)
    return wait_for_others(index, matrix, no_wait)


def wait_for_others(index: RunIndex, matrix: Matrix, no_wait: bool) -> Standing:
    """Where the matrix stands once none of its runs is queued or training (a worker that died reads interrupted),
    saying what it waits for."""
    said = None
    while True:
        now = standing(index, matrix)
        waiting = [p.run_id for p in now.active()]
        if not waiting or no_wait:
            return now
        if waiting != said:
            print(f"waiting for {plural(len(waiting), 'run')} queued or training elsewhere: {', '.join(waiting)}",
                  flush=True)
            said = waiting
        time.sleep(WAIT_POLL_S)


def drawing_scores(now: Standing, runs_dir: Path, data_dir: Path) -> dict[str, float | None]:
    """Run id -> the accuracy of its best.pt on the saved drawings, for the done runs; computed once and kept beside
    the checkpoint (inference.scores). Empty without enough drawings."""
    if drawing_count(data_dir) < MIN_FOR_ACCURACY:
        return {}
    from brnn_core.inference.scores import DrawingTensors, score_and_store, stored_accuracy

    signature, tensors, out = folder_signature(data_dir), DrawingTensors(data_dir), {}
    for place in now.places:
        ckpt = Run(Path(runs_dir) / place.run_id).best_ckpt if place.done else None
        if ckpt is None or not ckpt.is_file():
            continue
        known, score = stored_accuracy(ckpt, signature)
        score = score if known else score_and_store(ckpt, data_dir, signature, tensors)
        out[place.run_id] = score.accuracy if score else None
    return out


def render(summary: pd.DataFrame, fmt: str) -> str:
    """The summary as a text table (accuracies in percent, mean ± std), CSV or JSON (fractions, NaN as empty/null)."""
    if fmt == "json":
        records = summary.astype(object).where(summary.notna(), None).to_dict("records")
        return json.dumps(records, indent=2)
    if fmt == "csv":
        return summary.assign(run_ids=summary["run_ids"].map(" ".join)).to_csv(index=False).rstrip("\n")
    return shown(summary).to_string(index=False)
