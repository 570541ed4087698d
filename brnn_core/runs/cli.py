"""`python -m brnn_core runs list [--filter EXPR] [--format table|csv|json]`: the runs table from the shell."""

from __future__ import annotations

import argparse
import json
import sys

from brnn_core.runs.filter import FilterError, filter_table
from brnn_core.runs.index import RunIndex
from brnn_core.runs.rundir import RunError, default_runs_dir

FORMATS = ("table", "csv", "json")
TABLE_COLUMNS = ["run_id", "state", "dataset", "hidden", "layers", "lr", "epochs", "best_val_acc", "test_acc"]


def add_parser(sub) -> argparse.ArgumentParser:
    runs = sub.add_parser("runs", help="list the runs (filtered)")
    what = runs.add_subparsers(dest="runs_command", required=True)
    listing = what.add_parser("list", help="the runs table, newest first")
    listing.add_argument("--filter", default="", metavar="EXPR",
                         help="e.g. 'val_accuracy > 0.97 and lr <= 0.01 and state:finished' (docs/cli.md)")
    listing.add_argument("--format", default="table", choices=FORMATS)
    listing.add_argument("--runs-dir", default=None, help="default: $BRNN_RUNS_DIR or ./runs")
    listing.set_defaults(func=cmd_list)
    return runs


def cmd_list(args) -> int:
    runs_dir = args.runs_dir or default_runs_dir()
    try:
        table = filter_table(RunIndex(runs_dir).table(), args.filter)
    except FilterError as exc:
        raise RunError(f"the filter does not parse: {exc}") from None
    if args.format == "csv":
        table.to_csv(sys.stdout, index=False)
    elif args.format == "json":
        print(json.dumps(table.astype(object).where(table.notna(), None).to_dict("records"), indent=2, default=str))
    else:
        shown = table[TABLE_COLUMNS]
        print(shown.to_string(index=False, na_rep="") if len(shown) else "no runs match")
    return 0
