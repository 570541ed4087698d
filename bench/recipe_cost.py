"""What the new default recipe costs per epoch: today's defaults against the blog's recipe, alternated.

    .venv/bin/python bench/recipe_cost.py --rounds 3

Both sides train 2 epochs of the defaults on mnist-sample through `run_training` (the dashboard's worker code),
in turn, `--rounds` times: "new" as shipped (cosine schedule, standardised inputs, 30 % of the digits drawn as
canvas strokes), "old" with lr_schedule=constant, input_scale=unit and drawn_share=0. Prints the training
samples/s of each (the mean of its logged rows) and new/old. The schedule adds a few float operations per step,
the standardisation one elementwise op per batch, the drawn digits nothing per step (they replace images before
training; drawing them once, before the first step, is not in these rows): the ratio should be ~1.0
(bench/README.md, "Learning-rate schedule and input scale: cost").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from brnn_core.config import TrainConfig  # noqa: E402
from brnn_core.runs.rundir import create_run, new_run_config  # noqa: E402
from brnn_core.training.worker import run_training  # noqa: E402

SIDES = {"new": {}, "old": {"lr_schedule": "constant", "input_scale": "unit", "drawn_share": 0.0}}


def samples_per_s(sets: dict, workdir: Path) -> float:
    cfg = TrainConfig.from_dict({"dataset": "mnist-sample", "device": "cpu", "epochs": 2, **sets})
    run = create_run(workdir, new_run_config(cfg, workdir))
    assert run_training(run, data_dir=workdir) == "finished", run.status()
    m = run.metrics()
    return float(m[m["split"] == "train"]["samples_per_s"].mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    got: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="brnn-cost-") as tmp:
        for k in range(args.rounds):
            for side, sets in (SIDES.items() if k % 2 == 0 else reversed(SIDES.items())):
                got[side].append(samples_per_s(sets, Path(tmp) / f"{side}-{k}"))
                print(f"round {k + 1} {side}: {got[side][-1]:,.0f} samples/s", flush=True)
    new, old = statistics.median(got["new"]), statistics.median(got["old"])
    print(f"median samples/s: new {new:,.0f}, old {old:,.0f}; new/old {new / old:.3f} "
          f"(time per epoch {100 * (old / new - 1):+.1f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
