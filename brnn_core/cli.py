"""The command line: train, evaluate, predict, teach, lr-find, export, sweep, runs, compare, predraw and bench.

Exit codes: 0 ok, 2 bad input (the message says what and how to fix it), 1 failure.
"""

from __future__ import annotations

import argparse
import errno
import sys
import time
from pathlib import Path

from brnn_core.checkpoint import CheckpointError, check_state_matches, load_checkpoint
from brnn_core.config import (
    AMP_MODES,
    LIVE_FIELDS,
    TEACH_DEFAULTS,
    ConfigError,
    TrainConfig,
    load_train_config,
    parse_set,
)
from brnn_core.data import predraw
from brnn_core.data.canvas import load_image
from brnn_core.data.datasets import DATASETS, DatasetError, default_data_dir
from brnn_core.data.loading import ensure_dataset, load_dataset
from brnn_core.devices import amp_problem, device_problem, resolve_device
from brnn_core.fileio import atomic_write_json, inside, unwritable
from brnn_core.inference.export import FORMATS as EXPORT_FORMATS
from brnn_core.inference.export import ExportError, ExportMismatch, export_model
from brnn_core.inference.predictor import Predictor
from brnn_core.lab import add_parser as add_compare_parser
from brnn_core.locks import LockError
from brnn_core.runs.branch import create_planned, parse_from, plan_branch
from brnn_core.runs.cli import add_parser as add_runs_parser
from brnn_core.runs.index import seed_group, update_store
from brnn_core.runs.job_queue import job_info, new_job
from brnn_core.runs.jobs import in_turn, new_runs, prepare_resume
from brnn_core.runs.progress import ProgressPrinter
from brnn_core.runs.rundir import Run, RunError, default_runs_dir, resolve_run
from brnn_core.runs.seeds import SeedsError, parse_seeds, seed_configs
from brnn_core.states import State
from brnn_core.sweep.cli import add_parser as add_sweep_parser
from brnn_core.sweep.space import SweepError
from brnn_core.training import lr_find
from brnn_core.training.engine import evaluate
from brnn_core.training.foreground import say_waiting, train_in_line
from brnn_core.training.teach import TeachError, teach_config
from brnn_core.training.warmstart import initial_checkpoint
from brnn_core.training.worker import train_in_turn

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2
# measurement code is not part of the installed package (benchmarks/ in the repository)
BENCH_ELSEWHERE = ("the benchmark suite is not installed with brnn_core: in a checkout of the repository run "
                   "`make bench` or `python -m benchmarks` (benchmarks/README.md)")


class BadInput(Exception):
    """Anything the user can fix by changing the command line."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # answered before argparse, which would reject the suite's options that follow
        print(f"error: {BENCH_ELSEWHERE}", file=sys.stderr)
        return EXIT_BAD_INPUT
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (BadInput, ConfigError, CheckpointError, DatasetError, RunError, SweepError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_FAILURE
    except LockError as exc:  # its message names the lock file and how to mend it
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as exc:  # a read-only or full folder: a message that names it, not a traceback
        print(f"error: {os_error_message(exc, args)}", file=sys.stderr)
        return EXIT_FAILURE


def os_error_message(exc: OSError, args: argparse.Namespace) -> str:
    """What failed, on which path, and what to do about it: the fix depends on whether the path is the command's
    --out, in the runs folder or in the data folder (each named), or somewhere else."""
    path = exc.filename
    what = f"{exc.strerror or exc}" + (f" ({path})" if path else "")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{what}: free disk space on the disk that holds {path or 'the folders this command writes'}"
    if not path:
        return f"{what}: check that the folders this command uses can be written and that the disk has free space"
    out = getattr(args, "out", None)
    runs_dir = getattr(args, "runs_dir", None) or default_runs_dir()
    data_dir = getattr(args, "data_dir", None) or default_data_dir()
    if out is not None and (inside(path, out) or inside(out, path)):  # the file, or a folder on its way
        return f"{what}: choose another --out, or make its folder writable"
    if inside(path, runs_dir):
        return f"{what}: make the runs folder writable ({Path(runs_dir).absolute()}) and check that the disk has " \
               "free space"
    if inside(path, data_dir):
        return f"{what}: make the data folder ({Path(data_dir).absolute()}) readable and writable"
    return f"{what}: check that it can be read and written, and that its disk has free space"


def prog_name() -> str:
    """How the user called the CLI, for its usage lines: the `brnn` console script or `python -m brnn_core`."""
    return "brnn" if Path(sys.argv[0]).stem == "brnn" else "python -m brnn_core"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog_name(), description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_train, add_evaluate, add_predict, add_teach, add_lr_find, add_export, add_sweep_parser,
                add_runs_parser, add_compare_parser, add_predraw, add_bench):
        add(sub)
    return parser


def add_folders(parser: argparse.ArgumentParser, *, runs: bool = True, data: bool = True) -> None:
    if runs:
        parser.add_argument("--runs-dir", type=Path, default=None,
                            help="runs folder (default $BRNN_RUNS_DIR or ./runs)")
    if data:
        parser.add_argument("--data-dir", type=Path, default=None,
                            help="datasets folder (default $BRNN_DATA_DIR or ./data)")


def add_train(sub) -> None:
    train = sub.add_parser("train", help="train a model (a new run, --resume one, or branch one --from)")
    train.add_argument("--config", help="JSON file of TrainConfig fields")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override one field, e.g. --set lr=0.001 (repeatable)")
    train.add_argument("--resume", metavar="RUN", help="continue a run (directory or id) from its last.pt")
    train.add_argument("--from", dest="from_run", metavar="RUN[:last|:best]",
                       help="branch: a new run (beside RUN) that starts from RUN's checkpoint, last.pt by default "
                            "or best.pt with :best, with its weights and optimizer state (best.pt has none: a fresh "
                            "optimizer), and continues its step axis. --set may change lr, grad_clip, optimizer, "
                            "weight_decay, momentum, dataset and epochs (the total, counting RUN's epochs; default: "
                            "RUN's plan, or one more epoch), not the architecture")
    train.add_argument("--keep-tags", action="store_true", help="with --from: the branch starts with RUN's tags")
    train.add_argument("--seeds", metavar="S,S,...", help="a seed group: one run per seed (e.g. 0,1,2), the same "
                                                         "settings otherwise, trained one after another in turn")
    add_folders(train)
    train.set_defaults(func=cmd_train)


def add_evaluate(sub) -> None:
    ev = sub.add_parser("evaluate", help="loss, accuracy and per-class accuracy of a checkpoint")
    ev.add_argument("checkpoint", type=Path)
    ev.add_argument("--dataset", required=True, help=f"one of {', '.join(DATASETS)}")
    ev.add_argument("--split", default="test", choices=["test", "train"])
    ev.add_argument("--data-dir", type=Path, default=None)
    ev.add_argument("--device", default="cpu")
    ev.add_argument("--batch-size", type=int, default=TrainConfig().eval_batch_size)
    ev.add_argument("--amp", default="off", choices=AMP_MODES,
                    help="autocast precision (bf16: faster on CPUs with AVX512-BF16; "
                         "see docs/decisions/005-amp-off-by-default.md)")
    ev.set_defaults(func=cmd_evaluate)


def add_predict(sub) -> None:
    pr = sub.add_parser("predict", help="classify image files with a checkpoint")
    pr.add_argument("checkpoint", type=Path)
    pr.add_argument("images", nargs="+", type=Path)
    pr.add_argument("--top", type=int, default=3)
    pr.set_defaults(func=cmd_predict)


def add_teach(sub) -> None:
    teach = sub.add_parser("teach", help="fine-tune a checkpoint on your saved drawings (the Predict page's "
                                          "Teach it): a new run, held-out drawings and validation before -> after")
    teach.add_argument("checkpoint", type=Path, help="e.g. runs/<id>/checkpoints/best.pt")
    teach.add_argument("--share", type=float, help=f"the drawings' share of each epoch (default "
                                                   f"{TEACH_DEFAULTS['my_drawings']:g})")
    teach.add_argument("--epochs", type=int, help=f"epochs of fine-tuning (default {TEACH_DEFAULTS['epochs']})")
    teach.add_argument("--lr", type=float, help=f"the schedule's peak lr (default {TEACH_DEFAULTS['lr']:g})")
    teach.add_argument("--runs-dir", type=Path, default=None, help="runs folder (default $BRNN_RUNS_DIR or ./runs)")
    teach.add_argument("--data-dir", type=Path, default=None,
                       help="datasets folder holding my-drawings/ (default $BRNN_DATA_DIR or ./data)")
    teach.set_defaults(func=cmd_teach)


def add_lr_find(sub) -> None:
    lrf = sub.add_parser("lr-find", help="an lr range test on a throwaway copy of the model: loss against lr, "
                                         "and a suggested peak lr (it waits for its device like a run)")
    lrf.add_argument("--config", help="JSON file of TrainConfig fields")
    lrf.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one field (repeatable)")
    lrf.add_argument("--steps", type=int, default=lr_find.STEPS, help=f"steps of the test (default {lr_find.STEPS})")
    lrf.add_argument("--out", type=Path, default=Path("lr-find.csv"), help="the curve: lr,loss,smoothed_loss")
    add_folders(lrf)
    lrf.add_argument("--job", type=Path, default=None, help=argparse.SUPPRESS)  # the job folder a registry made
    lrf.set_defaults(func=cmd_lr_find)

def add_export(sub) -> None:
    exp = sub.add_parser("export", help="a checkpoint as an ONNX or TorchScript file: (N, 28, 28) images in [0, 1] "
                                         "in, class probabilities out; checked in its own runtime before it is kept")
    exp.add_argument("checkpoint", type=Path, help="e.g. runs/<id>/checkpoints/best.pt")
    exp.add_argument("--format", required=True, choices=list(EXPORT_FORMATS),
                     help="onnx (runs in ONNX Runtime, no PyTorch needed) or torchscript (torch.jit.load)")
    exp.add_argument("--out", required=True, type=Path, help="the file to write, e.g. model.onnx")
    exp.add_argument("--force", action="store_true", help="replace --out if it exists")
    exp.set_defaults(func=cmd_export)


def add_predraw(sub) -> None:
    pd = sub.add_parser("predraw", help="make a dataset's pen-stroke copies of training digits before its first run "
                                        "(the dashboard does it when it starts; it waits for the CPU like a run)")
    pd.add_argument("dataset", choices=list(DATASETS))
    pd.add_argument("--share", type=float, default=TrainConfig().drawn_share,
                    help="the share of training digits given pen-stroke copies (the Train form's default)")
    add_folders(pd)
    pd.add_argument("--job", type=Path, default=None, help=argparse.SUPPRESS)  # the job folder a registry made
    pd.set_defaults(func=cmd_predraw)


def add_bench(sub) -> None:
    sub.add_parser("bench", help="the benchmark suite runs from a checkout: `make bench`")  # main() answers it


# ---------------------------------------------------------------- train
def cmd_train(args) -> int:
    """`train`: one new run (or one per --seeds), a resume, or a branch; each waits its turn on its device."""
    data_dir = args.data_dir or default_data_dir()
    runs_dir = args.runs_dir or default_runs_dir()
    if args.keep_tags and not args.from_run:
        raise BadInput("--keep-tags copies a parent's tags to its branch: use it with --from RUN")
    seeds = seeds_from_args(args)
    if args.from_run:
        runs, resume = [branch_from_args(args, runs_dir, data_dir)], False
    elif args.resume:
        runs, resume = [resumed_from_args(args, runs_dir)], True
    else:
        cfg = load_train_config(args.config, args.set, data_dir)
        try:  # the file, its architecture and classes: refused before any run is created, not by the worker
            initial_checkpoint(cfg, list(DATASETS[cfg.dataset].classes))
        except CheckpointError as exc:
            raise BadInput(f"--set init_from: {exc}") from None
        ensure_dataset(cfg.dataset, data_dir)  # offline and missing: exit 2 before any run is created
        runs, resume = new_runs(runs_dir, seed_configs(cfg, seeds or [cfg.seed]), data_dir), False
    for run in runs:
        print(f"run directory: {run.path}", flush=True)
    if len(runs) > 1:
        print(f"seed group {seed_group(runs[0].config().get('train'))}: {len(runs)} runs, trained one after "
              "another", flush=True)
    states = train_in_line(runs, data_dir=data_dir, resume=resume)
    update_store(runs_dir)  # the dashboard's next start reads none of the runs already in it
    done = len(states) == len(runs) and all(s in (State.FINISHED, State.STOPPED) for s in states)
    return EXIT_OK if done else EXIT_FAILURE


def seeds_from_args(args) -> list[int] | None:
    """--seeds as a list, checked before anything is created (None when not given)."""
    if args.seeds is None:
        return None
    if args.resume or args.from_run:
        raise BadInput("--seeds starts new runs, one per seed: it cannot be combined with --resume or --from "
                       "(resume or branch each run on its own)")
    if any(s.split("=", 1)[0].strip() == "seed" for s in args.set):
        raise BadInput("--seeds gives each run its seed: drop --set seed=...")
    try:
        return parse_seeds(args.seeds)
    except SeedsError as exc:
        raise BadInput(f"--seeds {args.seeds}: {exc}") from None


def resumed_from_args(args, runs_dir: Path):
    """`train --resume RUN`: the run, checked resumable (jobs.prepare_resume), with the --set live changes sent to
    its next worker."""
    if args.config:
        raise BadInput("--resume continues a run with its own config: drop --config (only "
                       f"{', '.join(LIVE_FIELDS)} can change, with --set epochs=5)")
    try:
        return prepare_resume(resolve_run(runs_dir, args.resume), parse_set(args.set))
    except ValueError as exc:  # RunError too: no such run, or one that cannot be resumed (the reason)
        raise BadInput(str(exc)) from None


def cmd_lr_find(args) -> int:
    data_dir = args.data_dir or default_data_dir()
    if not 10 <= args.steps <= 10_000:
        raise BadInput(f"--steps {args.steps}: use 10 to 10,000 steps")
    summary = args.out.with_suffix(".json")
    if summary == args.out:
        raise BadInput(f"--out {args.out}: the curve is written as CSV and its summary beside it as "
                       f"{summary.name}, so they would share a file; name the curve {args.out.stem}.csv")
    for path in (args.out, summary):  # before the test: an --out it cannot write fails now, not in minutes
        problem = unwritable(path)
        if problem:
            raise BadInput(f"--out {args.out}: {problem}; choose another --out")
    cfg = load_train_config(args.config, args.set, data_dir)

    def test(turn) -> int:
        curve = lr_find.find_lr(cfg.replace(device=turn.device), data_dir, steps=args.steps,
                                progress=lambda m: print(m, flush=True))
        curve.write_csv(args.out)
        atomic_write_json(summary, {"suggestion": curve.suggestion, "rule": lr_find.RULE,
                                    "suggestions": curve.suggestions(), "stopped_early": curve.stopped_early,
                                    "steps": len(curve.lrs)})
        how = "stopped when the loss exploded" if curve.stopped_early else "ran to the end of the range"
        print(f"{len(curve.lrs)} steps, lr {curve.lrs[0]:.1e} to {curve.lrs[-1]:.1e} ({how}); curve: {args.out}, "
              f"summary: {summary}")
        if curve.suggestion is None:
            print("no suggestion: the loss never fell over the range (try more --steps or another optimizer)")
            return 0
        print(f"suggested peak lr: {curve.suggestion:.2g} ({lr_find.RULE}); try it with "
              f"--set lr={curve.suggestion:.2g}")
        return 0

    return tool_in_turn(args, "lr-find", cfg.device, "lr range test", test)


def cmd_predraw(args) -> int:
    """`predraw DATASET`: the pen-stroke copies of its training digits made now (in its turn on the CPU)."""
    data_dir = args.data_dir or default_data_dir()
    return tool_in_turn(args, "predraw", "cpu", f"pen-stroke drawing of {args.dataset}", lambda turn: predraw.predraw(
        args.dataset, data_dir, args.share, progress=lambda m: print(m, flush=True)) or 0)


def tool_in_turn(args, kind: str, device: str, title: str, work) -> int:
    """Run `work(turn)` in this job's turn in the queue: in the job folder a registry made (--job), else in one
    made now; the place in line is printed while it waits."""
    runs_dir = args.runs_dir or default_runs_dir()
    if args.job is not None:
        job = Run(args.job)
        if job_info(job.path).get("kind") != kind:
            raise BadInput(f"--job {args.job}: not a {kind} job folder")
    else:
        job = new_job(runs_dir, kind, device, title=title)
    return in_turn(job, work, say=say_waiting)


def cmd_teach(args) -> int:
    """`teach CHECKPOINT`: the same fine-tune as the Predict page's Teach it, in the foreground."""
    data_dir = args.data_dir or default_data_dir()
    chosen = {"my_drawings": args.share, "epochs": args.epochs, "lr": args.lr}
    try:
        cfg = teach_config(args.checkpoint, data_dir, **{k: v for k, v in chosen.items() if v is not None})
    except TeachError as exc:
        raise BadInput(str(exc)) from None
    ensure_dataset(cfg.dataset, data_dir)
    run = new_runs(args.runs_dir or default_runs_dir(), [cfg], data_dir)[0]
    print(f"run directory: {run.path}\nteaching {args.checkpoint} your drawings: {cfg.epochs} epochs, "
          f"{100 * cfg.my_drawings:g}% of each epoch drawings, peak lr {cfg.lr:g}", flush=True)
    state = train_in_turn(run, data_dir=data_dir, printer=ProgressPrinter(), say=say_waiting)
    print(f"\n{run.status().get('message') or state}", flush=True)
    if state == State.FINISHED:
        print(f"new checkpoint: {run.best_ckpt}", flush=True)
    return EXIT_OK if state == State.FINISHED else EXIT_FAILURE


def branch_from_args(args, runs_dir: Path, data_dir: Path):
    """`train --from RUN[:last|:best]`: check the branch, fetch its dataset, then create it (not started)."""
    if args.resume or args.config:
        raise BadInput("--from makes a new run from RUN's checkpoint: it cannot be combined with --resume or "
                       "--config (change settings with --set)")
    try:
        ref, kind = parse_from(args.from_run)
        plan = plan_branch(runs_dir, ref, kind, parse_set(args.set))
    except RunError as exc:  # also BranchError: an unknown parent, a missing checkpoint, a refused change
        raise BadInput(str(exc)) from None
    ensure_dataset(plan.cfg.dataset, data_dir)  # offline and missing: exit 2 before the branch is created
    run = create_planned(plan, data_dir, keep_tags=args.keep_tags)
    print(f"branch of {plan.parent.id} from its {kind}.pt (epoch {plan.checkpoint.epoch}, "
          f"step {plan.checkpoint.step})", flush=True)
    return run


# ---------------------------------------------------------------- evaluate / predict
def cmd_evaluate(args) -> int:
    if args.dataset not in DATASETS:
        raise BadInput(f"unknown dataset {args.dataset!r}; choose one of {', '.join(DATASETS)}")
    if args.batch_size < 1:
        raise BadInput("--batch-size must be at least 1")
    problem = device_problem(args.device)
    if problem:
        raise BadInput(f"--device: {problem}")
    problem = amp_problem(args.amp, args.device)
    if problem:
        raise BadInput(f"--amp: {problem}")
    ckpt = load_checkpoint(args.checkpoint)
    classes = DATASETS[args.dataset].classes
    if ckpt.model_config.num_classes != len(classes):
        raise BadInput(f"{args.checkpoint} predicts {ckpt.model_config.num_classes} classes but "
                       f"{args.dataset} has {len(classes)}")
    if not ckpt.bare and list(ckpt.classes) != list(classes):  # a bare state_dict names no classes
        fits = [name for name, info in DATASETS.items() if list(info.classes) == list(ckpt.classes)]
        raise BadInput(f"{args.checkpoint} was trained on other classes ({', '.join(ckpt.classes)}) than "
                       f"{args.dataset}'s ({', '.join(classes)}); evaluate it on "
                       + (" or ".join(fits) if fits else "the dataset it was trained on"))
    device = resolve_device(args.device)
    model = ckpt.build_model(device)
    check_state_matches(model.state_dict(), ckpt.model_state)
    ds = load_dataset(args.dataset, args.data_dir or default_data_dir())
    x, y = (ds.test_x, ds.test_y) if args.split == "test" else (ds.train_x, ds.train_y)
    t0 = time.perf_counter()
    result = evaluate(model, x.to(device), y.to(device), batch_size=args.batch_size, amp=args.amp,
                      num_classes=len(classes))
    seconds = time.perf_counter() - t0
    print(f"checkpoint: {args.checkpoint}")
    print(f"dataset: {args.dataset} ({args.split}, {len(y)} images, {ds.source}) on {device}"
          + (f", autocast {args.amp}" if args.amp != "off" else ""))
    print(f"loss: {result.loss:.4f}")
    print(f"accuracy: {100 * result.accuracy:.2f}%")
    print("per-class accuracy:")
    for name, acc in zip(classes, result.per_class, strict=False):
        print(f"  {name:>12}: {100 * acc:6.2f}%")
    print(f"time: {seconds:.2f}s ({len(y) / seconds:,.0f} images/s)")
    return EXIT_OK


def cmd_predict(args) -> int:
    if args.top < 1:
        raise BadInput("--top must be at least 1")
    predictor = Predictor.from_checkpoint(args.checkpoint)
    for path in args.images:
        try:
            probs = predictor.predict(load_image(path))
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        if probs is None:
            print(f"{path}: blank image, nothing to classify")
            continue
        order = probs.argsort()[::-1][:args.top]
        tops = ", ".join(f"{predictor.classes[i]} {100 * probs[i]:.1f}%" for i in order)
        print(f"{path}: {tops}")
    return EXIT_OK


def cmd_export(args) -> int:
    """`export CKPT --format F --out FILE`: written only once its own runtime gives the checkpoint's
    probabilities on real digits (inference.export)."""
    try:
        done = export_model(args.checkpoint, args.format, args.out, force=args.force)
    except ExportError as exc:
        raise BadInput(str(exc)) from None
    except ExportMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{done.path}: {done.format}, checked on {done.checked} test digits of mnist-sample: probabilities within "
          f"{done.max_difference:.1g} of the checkpoint's")
    return EXIT_OK

