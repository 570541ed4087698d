"""Which recurrent net, which direction: the cell x direction matrix at the defaults, scored on digits it never saw.

    python -m benchmarks.experiments.cell_matrix --runs-dir /tmp/matrix-runs --set amp=auto [--seeds 0 1 2]
    python -m benchmarks.experiments.cell_matrix --smoke      # a tiny matrix: the code path only

Runs `python -m brnn_core compare` on the folder (it trains whatever seed is missing, the same matrix as the Compare
page, and reports the rest), then scores each entry's best.pt files: on the real MNIST test digits (--test: only
measured, never trained or chosen on), on benchmarks/drawn_digits.py's bench (mnist-sample's 500 held-out test digits
redrawn as brush strokes, sets --drawn-sets, averaged per checkpoint), and reads each run's gradient flow through the
rows (gradient_flow.csv, the mean of its last --flow-last measurements): the ratio of ‖∂loss/∂h_t‖ at the row each
reader read first to the row it read last, per layer. Writes benchmarks/results/<date>_cell_matrix.json. Decision:
docs/decisions/023-cell-matrix.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import drawn_digits
from benchmarks.handwriting import DEFAULT_TEST, mnist_test
from benchmarks.harness.machine import machine_info
from brnn_core import cli
from brnn_core.runs.gradient_flow import FILE, profile, read_gradient_flow

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
SMOKE_SETS = ["hidden_size=8", "num_layers=1", "epochs=1", "drawn_share=0", "batch_size=512"]


def compare(runs_dir: Path, data_dir: Path, seeds: list[int], sets: list[str]) -> list[dict]:
    """The matrix's table (`compare --format json`), training what is missing first."""
    out = io.StringIO()
    args = ["compare", "--cells", "lstm,gru,rnn", "--directions", "bi,uni", "--seeds", ",".join(map(str, seeds)),
            "--format", "json", "--runs-dir", str(runs_dir), "--data-dir", str(data_dir),
            *[a for s in sets for a in ("--set", s)]]
    with contextlib.redirect_stdout(out):
        code = cli.main(args)
    if code != 0:
        raise SystemExit(f"compare exited {code}: {out.getvalue()[-2000:]}")
    return json.loads(out.getvalue())


def step_times(table: list[dict], sets: list[str], data_dir: Path, steps: int, rounds: int) -> dict[str, list[float]]:
    """'lstm two-way' -> the median seconds of one training step (the engine's: forward, loss, backward, Adam; the
    run's autocast) per round, at the shared settings on a batch of real digits, one torch thread; the entries are
    alternated within each round, so a change of the machine's load hits them all alike."""
    from brnn_core.config import load_train_config
    from brnn_core.data.batching import to_input
    from brnn_core.data.datasets import DATASETS
    from brnn_core.data.loading import load_dataset
    from brnn_core.model import RecurrentClassifier
    from brnn_core.training import engine
    from brnn_core.training.splits import model_config_for

    torch.set_num_threads(1)
    cfg = load_train_config(None, sets, data_dir)
    ds = load_dataset(cfg.dataset, data_dir)
    x, y = to_input(ds.train_x[:cfg.batch_size]), ds.train_y[:cfg.batch_size]
    nets = {}
    for entry in table:
        two_way = entry["direction"] == "two-way"
        one = cfg.replace(cell=entry["cell"], bidirectional=two_way, head="auto").validate()
        model = RecurrentClassifier(model_config_for(one, len(DATASETS[one.dataset].classes)))
        nets[f"{entry['cell']} {entry['direction']}"] = model, engine.make_optimizer(model.parameters(), "adam", 0.01)
    times: dict[str, list[float]] = {name: [] for name in nets}
    for _ in range(rounds):
        for name, (model, optimizer) in nets.items():
            per_step = []
            for k in range(steps + 2):  # two warm-up steps
                t0 = time.perf_counter()
                engine._optimizer_step(model, optimizer, x, y, cfg.amp, None, 0.0)
                if k >= 2:
                    per_step.append(time.perf_counter() - t0)
            times[name].append(statistics.median(per_step))
    return times


def flow_ratios(run_dir: Path, last: int) -> dict[str, float]:
    """'layer 1 forward' -> ‖∂loss/∂h‖ at the row the reader read first over the row it read last (forward: row 0
    over row 27; backward: row 27 over row 0), from the mean of the run's last `last` measurements."""
    prof = profile(read_gradient_flow(run_dir / FILE), last)
    out = {}
    for (layer, direction), part in prof.groupby(["layer", "direction"]):
        norms = part.sort_values("row")["grad_norm"].to_numpy()
        first, final = (norms[0], norms[-1]) if direction == "forward" else (norms[-1], norms[0])
        out[f"layer {layer} {direction}"] = float(first / final) if final > 0 else float("nan")
    return out


def spread(values: list[float]) -> dict:
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else None,
            "values": values}


def score_entry(entry: dict, runs_dir: Path, test: Path, drawn: list, labels, flow_last: int) -> dict:
    """Each done run's scores and gradient-flow ratios, and their mean and sample std over the entry's seeds."""
    runs = []
    for run_id in entry["run_ids"]:
        ckpt = runs_dir / run_id / "checkpoints" / "best.pt"
        if not ckpt.is_file():
            continue
        sets = [drawn_digits.score(ckpt, canvases, labels)["accuracy"] for canvases in drawn]
        runs.append({"run_id": run_id, "real_test": mnist_test(ckpt, test), "drawn": statistics.mean(sets),
                     "drawn_sets": sets, "flow": flow_ratios(runs_dir / run_id, flow_last)})
    ratios = sorted({k for r in runs for k in r["flow"]})
    return {**{k: entry[k] for k in ("cell", "direction", "n", "states", "params", "s_per_epoch", "group")},
            "best_val": spread([entry["best_val_acc"]]) if entry["n"] == 1 else
            {"mean": entry["best_val_acc"], "std": entry["best_val_acc_std"]},
            "real_test": spread([r["real_test"] for r in runs]), "drawn": spread([r["drawn"] for r in runs]),
            "flow": {k: spread([r["flow"][k] for r in runs if k in r["flow"]]) for k in ratios}, "runs": runs}


def line(row: dict) -> str:
    def pm(s: dict) -> str:
        return f"{100 * s['mean']:.2f}" + (f" ± {100 * s['std']:.2f}" if s.get("std") is not None else "")

    flows = ", ".join(f"{k} {v['mean']:.2g}" for k, v in row["flow"].items())
    step_ms = 1000 * statistics.median(row["step_s"]["values"])
    return (f"{row['cell']:>4} {row['direction']:>7} n={row['n']} params {row['params']:,} s/epoch "
            f"{row['s_per_epoch']:.1f} step {step_ms:.0f} ms | best val {pm(row['best_val'])} | real test "
            f"{pm(row['real_test'])} | drawn {pm(row['drawn'])} | first/last row {flows}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", type=Path, help="the matrix's runs folder (trained there by compare if missing)")
    ap.add_argument("--data-dir", type=Path, default=ROOT / "data")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="shared settings, as compare's")
    ap.add_argument("--test", type=Path, default=DEFAULT_TEST, help="an .npz of real MNIST test digits")
    ap.add_argument("--drawn-sets", nargs="+", type=int, default=[0, 1, 2], help="drawn-digit sets, one per seed")
    ap.add_argument("--flow-last", type=int, default=5, help="gradient-flow measurements averaged per run")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps per entry and round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the step timing, entries alternated")
    ap.add_argument("--smoke", action="store_true", help="a tiny matrix, 1 seed, 1 drawn set of 50 digits")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="brnn-cell-matrix-") as tmp:
        runs_dir = Path(tmp) / "runs" if args.smoke or args.runs_dir is None else args.runs_dir
        seeds, sets = ([0], args.set + SMOKE_SETS) if args.smoke else (args.seeds, args.set)
        t0 = time.perf_counter()
        table = compare(runs_dir, args.data_dir, seeds, sets)
        compare_s = time.perf_counter() - t0
        digits, labels = drawn_digits.bench_digits()
        digits, labels = (digits[::10], labels[::10]) if args.smoke else (digits, labels)  # every class
        drawn = [drawn_digits.drawn_set(digits, s) for s in (args.drawn_sets[:1] if args.smoke else args.drawn_sets)]
        rows = [score_entry(entry, runs_dir, args.test, drawn, labels, args.flow_last) for entry in table]
    steps = step_times(table, sets, args.data_dir, 3 if args.smoke else args.steps, 1 if args.smoke else args.rounds)
    for row in rows:
        row["step_s"] = spread(steps[f"{row['cell']} {row['direction']}"])
        print(line(row), flush=True)
    if args.smoke:
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{time.strftime('%Y-%m-%d_%H%M%S')}_cell_matrix.json"
    meta = {**machine_info(torch.device("cpu")), "seeds": seeds, "sets": sets, "test": str(args.test),
            "drawn_sets": args.drawn_sets, "compare_s": compare_s}
    out.write_text(json.dumps({"meta": meta, "entries": rows}, indent=2, default=str))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
