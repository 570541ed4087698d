"""How many epochs the offline sample's default run should train: test accuracy and time per setting.

    python -m benchmarks.experiments.epochs_default --epochs 2 20 --seeds 0 1 2 --runs-dir /tmp/epochs-runs
    python -m benchmarks.experiments.epochs_default --smoke     # one tiny run: the code path only

Each run is `python -m brnn_core train --set dataset=mnist-sample --set epochs=N --set seed=S` (the form's other
defaults); finished runs in --runs-dir are reused. best.pt is scored on the real MNIST test digits (--test: only
measured, never trained or chosen on). Decision: docs/decisions/091-epochs-per-dataset.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from brnn_core.checkpoint import load_checkpoint
from brnn_core.runs.rundir import Run, list_runs
from brnn_core.training.engine import evaluate

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TEST = ROOT.parent / "shared" / "data" / "mnist-test-8k.npz"
DATASET = "mnist-sample"
SMOKE_SETS = ("--set", "hidden_size=8", "--set", "num_layers=1", "--set", "drawn_share=0")  # trains in seconds
SMOKE_TEST_DIGITS = 200


def command(runs_dir: Path, epochs: int, seed: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs_dir), "--set", f"dataset={DATASET}",
            "--set", f"epochs={epochs}", "--set", f"seed={seed}", *extra]


def find_finished(runs_dir: Path, epochs: int, seed: int) -> Run | None:
    for run in list_runs(runs_dir):
        train = run.config().get("train", {})
        if (train.get("dataset"), train.get("epochs"), train.get("seed")) == (DATASET, epochs, seed) \
                and run.status().get("state") == "finished":
            return run
    return None


def test_digits(path: Path, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    with np.load(path) as z:
        x, y = z["images"][:limit], z["labels"][:limit]
    return torch.from_numpy(x.astype(np.uint8)), torch.from_numpy(y.astype(np.int64))


def score(run: Run, digits: tuple[torch.Tensor, torch.Tensor]) -> dict:
    status = run.status()
    model = load_checkpoint(run.best_ckpt).build_model("cpu")
    return {"run": run.id, "test_acc": evaluate(model, *digits).accuracy, "train_s": status.get("elapsed_s"),
            "whole_s": status["ended"] - status["created"], "val_acc": status.get("val_acc")}


def mean_std(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4g} ± {spread:.2g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, nargs="+", default=[2, 20])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--runs-dir", type=Path, help="where runs are made and reused (default: a temporary folder)")
    ap.add_argument("--test", type=Path, default=DEFAULT_TEST, help="npz with images (N, 28, 28) uint8 and labels")
    ap.add_argument("--smoke", action="store_true", help="one tiny 1-epoch run, scored on 200 digits")
    args = ap.parse_args(argv)
    if args.smoke:
        args.epochs, args.seeds = [1], [0]
    digits = test_digits(args.test, SMOKE_TEST_DIGITS if args.smoke else None)
    with tempfile.TemporaryDirectory() as tmp:
        runs_dir = args.runs_dir or Path(tmp) / "runs"
        rows: dict[int, list[dict]] = {}
        for epochs in args.epochs:
            for seed in args.seeds:
                run = find_finished(runs_dir, epochs, seed)
                if run is None:
                    cmd = command(runs_dir, epochs, seed, SMOKE_SETS if args.smoke else ())
                    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
                    run = find_finished(runs_dir, epochs, seed)
                    if run is None:
                        raise SystemExit(f"epochs={epochs} seed={seed}: the run did not finish")
                row = score(run, digits)
                rows.setdefault(epochs, []).append(row)
                print(f"epochs {epochs:3d} seed {seed}: test {row['test_acc']:.2%}  val {row['val_acc']:.2%}  "
                      f"training {row['train_s']:.1f} s ({row['train_s'] / epochs:.2f} s/epoch)  "
                      f"start to end {row['whole_s']:.1f} s  {row['run']}", flush=True)
    print(f"\n{len(digits[1]):,} test digits from {args.test}")
    for epochs, group in rows.items():
        print(f"epochs {epochs:3d} (n={len(group)}): test accuracy % {mean_std([r['test_acc'] * 100 for r in group])}"
              f"  training s {mean_std([r['train_s'] for r in group])}"
              f"  s/epoch {mean_std([r['train_s'] / epochs for r in group])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
