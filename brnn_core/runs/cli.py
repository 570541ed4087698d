"""`python -m brnn_core runs list | tag | note | export | prune`: the runs table from the shell (filtered, or by
seed group), tags and notes, every metrics row of the selected runs in one file, and freeing disk."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from brnn_core.fileio import unwritable
from brnn_core.runs import tensorboard_log
from brnn_core.runs.export import group_summary, long_table, write_table
from brnn_core.runs.filter import FilterError, filter_table
from brnn_core.runs.index import RunIndex
from brnn_core.runs.notes import change_tags, check_tag, write_notes
from brnn_core.runs.retention import DEFAULT_PER, METRICS, PER, apply_prune, plan_prune
from brnn_core.runs.rundir import RunError, default_runs_dir, resolve_run

FORMATS = ("table", "csv", "json")
EXPORT_FORMATS = ("csv", "parquet", "tensorboard")
TABLE_COLUMNS = ["run_id", "state", "dataset", "cell", "bidirectional", "hidden", "layers", "lr", "epochs",
                 "best_val_acc", "test_acc"]


def add_parser(sub) -> argparse.ArgumentParser:
    runs = sub.add_parser("runs", help="list the runs (filtered)")
    what = runs.add_subparsers(dest="runs_command", required=True)
    listing = what.add_parser("list", help="the runs table, newest first")
    listing.add_argument("--filter", default="", metavar="EXPR",
                         help="e.g. 'val_accuracy > 0.97 and lr <= 0.01 and state:finished' (docs/cli.md)")
    listing.add_argument("--format", default="table", choices=FORMATS)
    listing.add_argument("--groups", action="store_true",
                         help="one row per seed group (runs that differ only in seed): n, mean and std")
    listing.add_argument("--runs-dir", default=None, help="default: $BRNN_RUNS_DIR or ./runs")
    listing.set_defaults(func=cmd_list)
    tag = what.add_parser("tag", help="add or remove tags of runs")
    tag.add_argument("run", nargs="+", help="run ids (or folders)")
    tag.add_argument("--add", action="append", default=[], metavar="TAG")
    tag.add_argument("--remove", action="append", default=[], metavar="TAG")
    tag.add_argument("--runs-dir", default=None, help="default: $BRNN_RUNS_DIR or ./runs")
    tag.set_defaults(func=cmd_tag)
    note = what.add_parser("note", help="set a run's note (free text; '' clears it)")
    note.add_argument("run", help="a run id (or folder)")
    note.add_argument("text")
    note.add_argument("--runs-dir", default=None, help="default: $BRNN_RUNS_DIR or ./runs")
    note.set_defaults(func=cmd_note)
    export = what.add_parser("export", help="every metrics row of the selected runs as one CSV or Parquet table, "
                                            "or TensorBoard event files for runs made without them")
    export.add_argument("--format", choices=EXPORT_FORMATS, default=None,
                        help="csv or parquet (default: by --out's suffix), or tensorboard: event files in each run's "
                             "folder that has none, so `tensorboard --logdir RUNS_DIR` shows it")
    export.add_argument("--out", type=Path, default=None,
                        help="FILE.csv or FILE.parquet; with --format tensorboard a folder to write OUT/<run id>/ "
                             "in instead of the runs' own folders")
    export.add_argument("--filter", default="", metavar="EXPR", help="which runs (as runs list --filter)")
    export.add_argument("--runs-dir", default=None, help="default: $BRNN_RUNS_DIR or ./runs")
    export.set_defaults(func=cmd_export)
    prune = what.add_parser("prune", help="delete the checkpoints of ended runs outside the best K (records stay)")
    prune.add_argument("--keep-best", required=True, type=int, metavar="K", help="runs kept whole in each --per")
    prune.add_argument("--by", default="val_loss", metavar="METRIC",
                       help=f"how runs are ranked: {', '.join(METRICS)} (default val_loss, lowest first)")
    prune.add_argument("--per", default=DEFAULT_PER, choices=PER,
                       help="rank within each seed group (default), each sweep, or all selected runs together")
    prune.add_argument("--filter", default="", metavar="EXPR", help="which runs (as runs list --filter)")
    prune.add_argument("--dry-run", action="store_true", help="print what would go and what it frees; delete nothing")
    prune.add_argument("--runs-dir", default=None, help="default: $BRNN_RUNS_DIR or ./runs")
    prune.set_defaults(func=cmd_prune)
    return runs


def selected(runs_dir, text: str):
    try:
        return filter_table(RunIndex(runs_dir).table(), text)
    except FilterError as exc:
        raise RunError(f"the filter does not parse: {exc}") from None


def cmd_export(args) -> int:
    runs_dir = args.runs_dir or default_runs_dir()
    if args.format == "tensorboard":
        return export_tensorboard(runs_dir, args)
    if args.out is None:
        raise RunError("--out FILE.csv or FILE.parquet: where to write the table (or --format tensorboard)")
    if args.out.suffix.lower() not in (".csv", ".parquet") or args.format not in (None, args.out.suffix[1:].lower()):
        raise RunError(f"--out {args.out}: name a .csv or .parquet file" +
                       (f" (--format {args.format} writes .{args.format})" if args.format else ""))
    problem = unwritable(args.out)
    if problem:
        raise RunError(f"--out {args.out}: {problem}; choose another --out")
    table = selected(runs_dir, args.filter)
    frame = long_table(runs_dir, table)
    write_table(frame, args.out)
    print(f"{len(frame):,} metrics rows of {len(table):,} runs -> {args.out}")
    return 0


def export_tensorboard(runs_dir, args) -> int:
    """`runs export --format tensorboard`: event files for the selected runs made without them."""
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise RunError(f"--out {args.out} is a file; with --format tensorboard give a folder (or leave --out out "
                       "to write into each run's own folder)")
    table = selected(runs_dir, args.filter)
    try:
        done = tensorboard_log.export_runs(runs_dir, list(table["run_id"]), args.out)
    except tensorboard_log.TensorBoardMissing as exc:
        raise RunError(str(exc)) from None
    for run_id, outcome in done:
        print(f"{run_id}: {outcome}")
    written = sum(outcome.startswith("written") for _, outcome in done)
    print(f"TensorBoard files for {written} of {len(done)} runs; see them with: tensorboard --logdir "
          f"{args.out or runs_dir}")
    return 0


def cmd_prune(args) -> int:
    runs_dir = args.runs_dir or default_runs_dir()
    table = selected(runs_dir, args.filter)
    plan = plan_prune(runs_dir, list(table["run_id"]), args.keep_best, args.by, args.per)
    if args.dry_run:
        print("\n".join(["dry run: nothing is deleted", *plan.lines()]))
        return 0
    print("\n".join(plan.lines(dict(apply_prune(plan)))))
    print("their config, metrics, status, notes and report are kept")
    return 0


def cmd_list(args) -> int:
    runs_dir = args.runs_dir or default_runs_dir()
    table = selected(runs_dir, args.filter)
    if args.groups:
        table = group_summary(table)
    if args.format == "csv":
        table.to_csv(sys.stdout, index=False)
    elif args.format == "json":
        print(json.dumps(table.astype(object).where(table.notna(), None).to_dict("records"), indent=2, default=str))
    else:
        damaged = not args.groups and table["problem"].fillna("").astype(bool).any()
        shown = table if args.groups else table[TABLE_COLUMNS + (["problem"] if damaged else [])]
        # convert_dtypes: a damaged run's empty cells must not turn the others' whole numbers into floats
        shown = shown.convert_dtypes()
        print(shown.astype(object).where(shown.notna(), "").to_string(index=False) if len(shown) else "no runs match")
    return 0


def _runs(args, refs: list[str]) -> list:
    runs_dir = args.runs_dir or default_runs_dir()
    try:  # every id is checked before anything is written
        return [resolve_run(runs_dir, ref) for ref in refs]
    except ValueError as exc:
        raise RunError(str(exc)) from None


def cmd_tag(args) -> int:
    if not args.add and not args.remove:
        raise RunError("say what to change: --add TAG and/or --remove TAG")
    runs = _runs(args, args.run)
    try:
        for tag in args.add + args.remove:
            check_tag(tag)
        for run in runs:
            notes = change_tags(run.path, args.add, args.remove)
            print(f"{run.id}: {', '.join(notes.tags) or '(no tags)'}")
    except ValueError as exc:
        raise RunError(str(exc)) from None
    return 0


def cmd_note(args) -> int:
    (run,) = _runs(args, [args.run])
    try:
        write_notes(run.path, note=args.text)
    except ValueError as exc:
        raise RunError(str(exc)) from None
    print(f"{run.id}: note {'saved' if args.text else 'cleared'}")
    return 0
