"""TPE against random search at the same trial budget: the best validation loss each finds, per seed.

    python -m benchmarks.experiments.tpe_vs_random --seeds 0 1 2 --trials 8
    python -m benchmarks.experiments.tpe_vs_random --smoke     # one seed, 2 one-epoch trials per algorithm

Runs `python -m brnn_core sweep` as a user would (embedded Ray, fifo, 2 trials at a time) with `--search-alg
random` and `--search-alg tpe` on the same space and base seed. Decision: docs/decisions/015-tpe-vs-random.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPACE = ["--search", "lr=loguniform:0.0003:0.1", "--search", "hidden_size=choice:8,16,32"]
BASE = ["--set", "num_layers=1", "--set", "epochs=2", "--set", "batch_size=200"]


def best_loss(alg: str, seed: int, trials: int, folder: Path, base: list[str]) -> float:
    runs = folder / f"{alg}-{seed}"
    cmd = [sys.executable, "-m", "brnn_core", "sweep", "--runs-dir", str(runs), "--data-dir", str(folder / "data"),
           *base, "--set", f"seed={seed}", *SPACE, "--trials", str(trials), "--search-alg", alg, "--concurrency", "2"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{alg} seed {seed}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    (sweep,) = (runs / "sweeps").iterdir()
    return float(json.loads((sweep / "sweep.json").read_text())["best"]["value"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--smoke", action="store_true", help="seed 0, 2 trials of 1 epoch each (numbers meaningless)")
    args = ap.parse_args(argv)
    base = BASE
    if args.smoke:
        args.seeds, args.trials, base = [0], 2, [*BASE, "--set", "epochs=1"]
    got: dict[str, list[float]] = {"random": [], "tpe": []}
    with tempfile.TemporaryDirectory(prefix="brnn-tpe-") as tmp:
        for seed in args.seeds:
            for alg in got:
                got[alg].append(best_loss(alg, seed, args.trials, Path(tmp), base))
                print(f"seed {seed} {alg}: best val_loss {got[alg][-1]:.4f}", flush=True)
    for alg, values in got.items():
        print(f"{alg}: mean best val_loss {statistics.mean(values):.4f} over seeds {args.seeds} "
              f"({', '.join(f'{v:.4f}' for v in values)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
