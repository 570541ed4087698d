"""What the Predict page's "Inside the <network>" costs: one digit's internals, and the open panel's work per stroke.

    .venv/bin/python -m benchmarks.inside_lstm [--checkpoint PT | --cell gru [--one-way]] [--threads 2] [--strokes 9]

With no checkpoint, a model of the default size (of `--cell`, two-way unless `--one-way`) with fresh weights (the
cost does not depend on what was learned, except integrated gradients, which refines its path on saturated gates).
Targets: internals <= 10 ms, a stroke with the panel open <= 150 ms (this work plus the page's own,
benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from brnn_core import charts
from brnn_core.checkpoint import load_checkpoint
from brnn_core.inference.explain import integrated_gradients, row_importance
from brnn_core.inference.internals import model_internals
from brnn_core.model import CELLS, ModelConfig, RecurrentClassifier, network_name


def timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up: first-call allocations
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.inside_lstm", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=None, help="a best.pt to time (default: the default model size)")
    parser.add_argument("--cell", default="lstm", choices=list(CELLS), help="without --checkpoint: which cell")
    parser.add_argument("--one-way", action="store_true", help="without --checkpoint: a one-way net")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--strokes", type=int, default=9)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = (load_checkpoint(args.checkpoint).build_model("cpu") if args.checkpoint
             else RecurrentClassifier(ModelConfig(cell=args.cell, bidirectional=not args.one_way,
                                                  head="last" if args.one_way else "bidir"))).eval()
    x = torch.rand(28, 28) * (torch.rand(28, 28) > 0.8)  # sparse ink, as a drawing

    def panel() -> None:
        cells = model_internals(model, x).layers[-1]["forward"]
        charts.internals_figure(cells.h.numpy(), "h", "layer, forward")
        charts.row_importance_figure(row_importance(model, x, 0), "0")
        attribution, _, _ = integrated_gradients(model, x, 0)
        charts.attribution_figure(x.numpy(), attribution, "0")

    internals = timed(lambda: model_internals(model, x), 5 * args.strokes)
    strokes = timed(panel, args.strokes)
    print(f"threads {args.threads}, {network_name(model.cfg)}, hidden {model.cfg.hidden_size}, "
          f"layers {model.cfg.num_layers}")
    print(f"internals of one digit: median {statistics.median(internals):.1f} ms (min {min(internals):.1f}, "
          f"max {max(internals):.1f}; target <= 10)")
    print(f"open panel per stroke: median {statistics.median(strokes):.0f} ms (min {min(strokes):.0f}, "
          f"max {max(strokes):.0f}; with the page's own work, target <= 150)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
