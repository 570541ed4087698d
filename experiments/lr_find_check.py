"""Is the lr finder's suggestion a good peak lr? 5-epoch runs at the suggested lr against the default lr.

    .venv/bin/python -m experiments.lr_find_check --seeds 0 1 2 --runs-dir /tmp/lr-find-runs
    .venv/bin/python -m experiments.lr_find_check --smoke     # tiny runs: the code path only

Per seed: `python -m brnn_core lr-find --set seed=S --set epochs=E` (the form's other defaults), then
`train` at the suggestion and at the default lr; best.pt is scored on the real MNIST test digits (--test: only
measured, never trained or chosen on). Decision: docs/decisions/017-lr-finder-check.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from brnn_core.config import TrainConfig
from brnn_core.runs.rundir import Run
from experiments.epochs_default import DEFAULT_TEST, ROOT, SMOKE_SETS, SMOKE_TEST_DIGITS, mean_std, score, test_digits


def suggestion(runs_dir: Path, seed: int, sets: tuple[str, ...]) -> float:
    out = runs_dir / f"lr-find-seed{seed}.csv"
    if not out.with_suffix(".json").is_file():
        subprocess.run([sys.executable, "-m", "brnn_core", "lr-find", "--out", str(out), *sets], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    found = json.loads(out.with_suffix(".json").read_text())["suggestion"]
    if found is None:
        raise SystemExit(f"seed {seed}: the lr finder made no suggestion")
    return float(f"{found:.2g}")  # what "Use this lr" puts in the form


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
    results: dict[str, list[float]] = {"suggested": [], "default": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = args.runs_dir or Path(tmp) / "runs"
        runs_dir.mkdir(parents=True, exist_ok=True)
        cache_file = runs_dir / "lr-find-check.json"  # settings -> run id, so a rerun reuses finished runs
        cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
        for seed in args.seeds:
            sets = ("--set", "dataset=mnist-sample", "--set", f"epochs={args.epochs}", "--set", f"seed={seed}",
                    *(SMOKE_SETS if args.smoke else ()))
            lr = suggestion(runs_dir, seed, sets)
            line = [f"seed {seed}: suggested lr {lr:g}"]
            for name, value in (("suggested", lr), ("default", default_lr)):
                row = score(trained(runs_dir, value, sets, cache), digits)
                results[name].append(row["test_acc"] * 100)
                line.append(f"{name} ({value:g}) test {row['test_acc']:.2%} val {row['val_acc']:.2%} {row['run']}")
            cache_file.write_text(json.dumps(cache, indent=1))
            print("  ".join(line), flush=True)
    print(f"\n{len(digits[1]):,} test digits from {args.test}; {args.epochs} epochs; seeds {args.seeds}")
    for name, accs in results.items():
        print(f"{name:9s}: test accuracy % {mean_std(accs)}  per seed {', '.join(f'{a:.2f}' for a in accs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
