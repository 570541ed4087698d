"""Is the lr finder's suggestion a good peak lr? 5-epoch runs at the suggested lr against the default lr.

    python -m benchmarks.experiments.lr_find_check --seeds 0 1 2 --runs-dir /tmp/lr-find-runs
    python -m benchmarks.experiments.lr_find_check --smoke     # tiny runs: the code path only

Per seed: `python -m brnn_core lr-find --set seed=S --set epochs=E` (the form's other defaults), then
`train` at the suggestion and at the default lr; best.pt is scored on the real MNIST test digits (--test: only
measured, never trained or chosen on). Decision: docs/decisions/017-lr-finder-check.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.experiments.epochs_default import (
    DEFAULT_TEST,
    ROOT,
    SMOKE_SETS,
    SMOKE_TEST_DIGITS,
    mean_std,
    score,
    test_digits,
)
from brnn_core.config import TrainConfig
from brnn_core.runs.rundir import Run
from brnn_core.training import lr_find


def suggestions(runs_dir: Path, seed: int, sets: tuple[str, ...]) -> dict[str, float]:
    """Each rule's suggestion (lr_find.RULES) on this seed's range test, as "Use this lr" puts it in the form."""
    out = runs_dir / f"lr-find-seed{seed}.csv"
    if not out.is_file():
        subprocess.run([sys.executable, "-m", "brnn_core", "lr-find", "--out", str(out), *sets], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    lrs, smoothed = [float(r["lr"]) for r in rows], [float(r["smoothed_loss"]) for r in rows]
    found = {rule: lr_find.suggest(lrs, smoothed, rule) for rule in lr_find.RULES}
    if None in found.values():
        raise SystemExit(f"seed {seed}: a rule made no suggestion: {found}")
    return {rule: float(f"{lr:.2g}") for rule, lr in found.items()}


def trained(runs_dir: Path, lr: float, sets: tuple[str, ...], cache: dict) -> Run:
    """The finished run of these settings at `lr`: trained now unless this folder's cache names it."""
    key = " ".join([*sets, f"lr={lr}"])
    if key not in cache:
        out = subprocess.run([sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs_dir), *sets,
                              "--set", f"lr={lr}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
        found = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("run directory: ")]
        cache[key] = Path(found[0]).name
    run = Run(runs_dir / cache[key])
    if run.status().get("state") != "finished":
        raise SystemExit(f"{key}: run {run.id} did not finish")
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--runs-dir", type=Path, help="where runs are made and reused (default: a temporary folder)")
    ap.add_argument("--test", type=Path, default=DEFAULT_TEST, help="npz with images (N, 28, 28) uint8 and labels")
    ap.add_argument("--smoke", action="store_true", help="one tiny 1-epoch seed, scored on 200 digits")
    args = ap.parse_args(argv)
    if args.smoke:
        args.epochs, args.seeds = 1, [0]
    digits = test_digits(args.test, SMOKE_TEST_DIGITS if args.smoke else None)
    default_lr = TrainConfig().lr
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = args.runs_dir or Path(tmp) / "runs"
        runs_dir.mkdir(parents=True, exist_ok=True)
        cache_file = runs_dir / "lr-find-check.json"  # settings -> run id, so a rerun reuses finished runs
        cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
        for seed in args.seeds:
            sets = ("--set", "dataset=mnist-sample", "--set", f"epochs={args.epochs}", "--set", f"seed={seed}",
                    *(SMOKE_SETS if args.smoke else ()))
            lrs = {**suggestions(runs_dir, seed, sets), "default": default_lr}
            for name, lr in lrs.items():
                row = {**score(trained(runs_dir, lr, sets, cache), digits), "lr": lr}
                cache_file.write_text(json.dumps(cache, indent=1))
                results.setdefault(name, []).append(row)
                print(f"seed {seed} {name:8s} lr {lr:<8g} val {row['val_acc']:.2%}  test {row['test_acc']:.2%}  "
                      f"{row['run']}", flush=True)
    print(f"\n{len(digits[1]):,} test digits from {args.test}; {args.epochs} epochs; seeds {args.seeds}")
    for name, rows in results.items():
        lrs = ", ".join(f"{r['lr']:g}" for r in rows)
        tests = [r["test_acc"] * 100 for r in rows]
        print(f"{name:8s}: lr {lrs}  val % {mean_std([r['val_acc'] * 100 for r in rows])}  "
              f"test % {mean_std(tests)}  per seed {', '.join(f'{t:.2f}' for t in tests)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
