"""How well the default recipe reads handwriting it never saw: per seed, MNIST test digits, drawn digits, letterforms.

    .venv/bin/python -m benchmarks.handwriting --seeds 0 1 2 [--set K=V ...] [--teach] [--keep DIR]

Each seed trains the defaults for 5 epochs on mnist-sample through the worker's code (`train_run_dir`), then scores
best.pt on the real MNIST test digits (`--test`, default ../shared/data/mnist-test-8k.npz: only measured, never
trained or chosen on), on benchmarks/drawn_digits.py's set and on benchmarks/letterforms.py's; `--teach` adds
Teach it. Prints a row per seed, the mean and spread (targets: benchmarks/README.md, "Targets and latest results").
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import drawn_digits, letterforms
from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import TrainConfig, parse_set
from brnn_core.runs.rundir import create_run, new_run_config
from brnn_core.training.engine import evaluate
from brnn_core.training.worker import train_run_dir

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_TEST = ROOT.parent / "shared" / "data" / "mnist-test-8k.npz"


def train(seed: int, sets: dict, epochs: int, workdir: Path) -> tuple[Path, float]:
    """Train one seed; (best.pt, seconds per epoch)."""
    cfg = TrainConfig.from_dict({**TrainConfig().to_dict(), "dataset": "mnist-sample", "device": "cpu",
                                 "epochs": epochs, "seed": seed, **sets})
    run = create_run(workdir / "runs", new_run_config(cfg, workdir / "data"))
    t0 = time.perf_counter()
    state = train_run_dir(run, data_dir=workdir / "data")
    if state != "finished":
        raise SystemExit(f"seed {seed}: {state}: {run.status().get('message')}")
    return run.best_ckpt, (time.perf_counter() - t0) / epochs


def mnist_test(ckpt: Path, path: Path) -> float:
    with np.load(path) as z:
        x, y = torch.from_numpy(z["images"].astype(np.uint8)), torch.from_numpy(z["labels"].astype(np.int64))
    return evaluate(load_checkpoint(ckpt).build_model("cpu"), x, y).accuracy


def row(seed: int, ckpt: Path, spe: float, test: Path, drawn, forms) -> dict:
    return {"seed": seed, "mnist_test": mnist_test(ckpt, test),
            "drawn": drawn_digits.score(ckpt, drawn[0], drawn[1])["accuracy"],
            "letterforms": letterforms.score(ckpt, *forms)["all"], "s_per_epoch": spe}


def summary(rows: list[dict], key: str) -> str:
    values = [100 * r[key] for r in rows]
    spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    return f"{key} {statistics.mean(values):.2f}%{spread} ({', '.join(f'{v:.1f}' for v in values)})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="TrainConfig overrides")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--test", type=Path, default=DEFAULT_TEST, help="an .npz of real MNIST test digits")
    ap.add_argument("--teach", action="store_true", help="also Teach it each model the letterforms (20 per digit)")
    ap.add_argument("--keep", type=Path, help="copy each seed's best.pt here (seed<N>.pt), e.g. for canvas_path.py")
    args = ap.parse_args(argv)
    sets = parse_set(args.set)
    digits, labels = drawn_digits.bench_digits()
    drawn = (drawn_digits.drawn_set(digits, 0), labels)
    forms = letterforms.drawing_set(letterforms.TEST_SEED, letterforms.PER_DIGIT_TEST)
    teaching = letterforms.drawing_set(letterforms.TEACH_SEED, letterforms.PER_DIGIT_TEACH) if args.teach else None
    rows, taught = [], []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="brnn-hw-") as tmp:
            ckpt, spe = train(seed, sets, args.epochs, Path(tmp))
            rows.append(row(seed, ckpt, spe, args.test, drawn, forms))
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ckpt, args.keep / f"seed{seed}.pt")
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()}, flush=True)
            if teaching is not None:
                new, message = letterforms.teach(ckpt, teaching[0], teaching[1], Path(tmp) / "teach")
                taught.append(row(seed, new, 0.0, args.test, drawn, forms))
                print(f"  after Teach it: {taught[-1]}  ({message})", flush=True)
    print(f"{len(rows)} seeds, {args.epochs} epochs, sets {sets or 'none'}:")
    for key in ("mnist_test", "drawn", "letterforms"):
        print("  " + summary(rows, key) + (f"  -> after Teach it {summary(taught, key)}" if taught else ""))
    print(f"  seconds per epoch {statistics.mean(r['s_per_epoch'] for r in rows):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
