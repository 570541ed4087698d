"""What the default recipe costs per epoch: the shipped defaults against the blog's recipe, alternated.

    python -m benchmarks.experiments.recipe_cost --rounds 3
    python -m benchmarks.experiments.recipe_cost --smoke     # one round of a tiny model: the code path only

Both sides train 2 epochs on mnist-sample through `train_run_dir` (the worker's code), in turn: "new" as shipped,
"old" with lr_schedule=constant, input_scale=unit and drawn_share=0. Prints each side's training samples/s
(the mean of its logged rows) and new/old. Decision: docs/decisions/009-training-recipe.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from brnn_core.config import TrainConfig
from brnn_core.runs.rundir import create_run, new_run_config
from brnn_core.training.worker import train_run_dir

SIDES = {"new": {}, "old": {"lr_schedule": "constant", "input_scale": "unit", "drawn_share": 0.0}}


def samples_per_s(sets: dict, workdir: Path, size: dict) -> float:
    cfg = TrainConfig.from_dict({"dataset": "mnist-sample", "device": "cpu", "epochs": 2, **size, **sets})
    run = create_run(workdir, new_run_config(cfg, workdir))
    assert train_run_dir(run, data_dir=workdir) == "finished", run.status()
    m = run.metrics()
    return float(m[m["split"] == "train"]["samples_per_s"].mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="1 round, 1 epoch of hidden 8 (numbers meaningless)")
    args = ap.parse_args(argv)
    size = {"epochs": 1, "hidden_size": 8, "num_layers": 1} if args.smoke else {}
    if args.smoke:
        args.rounds = 1
    got: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="brnn-cost-") as tmp:
        for k in range(args.rounds):
            for side, sets in (SIDES.items() if k % 2 == 0 else reversed(SIDES.items())):
                got[side].append(samples_per_s(sets, Path(tmp) / f"{side}-{k}", size))
                print(f"round {k + 1} {side}: {got[side][-1]:,.0f} samples/s", flush=True)
    new, old = statistics.median(got["new"]), statistics.median(got["old"])
    print(f"median samples/s: new {new:,.0f}, old {old:,.0f}; new/old {new / old:.3f} "
          f"(time per epoch {100 * (old / new - 1):+.1f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
