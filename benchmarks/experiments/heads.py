"""Head study: TrainConfig.head = 'bidir' vs 'last', trained through the CLI, written as a Markdown report.

    python -m benchmarks.experiments.heads --out /tmp/heads.md [--only mnist-sample] [--threads 1 --jobs 2]
    python -m benchmarks.experiments.heads --smoke      # one tiny run per head: the code path only

Every run is `python -m brnn_core train --set head=... --set epochs=... --set dataset=... --set seed=...`;
finished runs in --runs-dir are reused. Validation accuracy from metrics.csv, test accuracy (best.pt) from
status.json. Decision: docs/decisions/006-bidir-head.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from brnn_core.environment import cpu_model
from brnn_core.runs.rundir import Run, list_runs

ROOT = Path(__file__).resolve().parents[2]

HEADS = ("bidir", "last")
PLAN = [  # (dataset, epochs, seeds)
    ("mnist-sample", 5, (0, 1, 2)),
    ("fashion-mnist", 2, (0, 1)),
]
SMOKE_SETS = ("--set", "hidden_size=8", "--set", "num_layers=1")  # --smoke: a model that trains in seconds


def command(runs_dir: Path, dataset: str, epochs: int, seed: int, head: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs_dir), "--set", f"head={head}",
            "--set", f"epochs={epochs}", "--set", f"dataset={dataset}", "--set", f"seed={seed}", *extra]


def shown(cmd: list[str]) -> str:
    return " ".join([".venv/bin/python", *cmd[1:]])


def find_finished(runs_dir: Path, dataset: str, epochs: int, seed: int, head: str):
    for run in list_runs(runs_dir):
        train = run.config().get("train", {})
        if (train.get("dataset"), train.get("epochs"), train.get("seed"), train.get("head")) == (
                dataset, epochs, seed, head) and run.status().get("state") == "finished":
            return run
    return None


def result(run) -> dict:
    status = run.status()
    metrics = run.metrics()
    val = metrics[metrics["split"] == "val"].sort_values("step")
    started, ended = status.get("started") or status.get("created"), status.get("ended")
    return {"run_id": run.id, "val_acc_final": float(val["accuracy"].iloc[-1]),
            "val_acc_best": float(val["accuracy"].max()), "test_acc": float(status["test_acc"]),
            "started": float(started), "ended": float(ended),
            "minutes": (float(ended) - float(started)) / 60 if started and ended else float("nan")}


def train_one(runs_dir: Path, key: tuple, env: dict, extra: tuple[str, ...] = ()) -> dict:
    dataset, epochs, seed, head = key
    run = find_finished(runs_dir, *key)
    cmd = command(runs_dir, dataset, epochs, seed, head, extra)
    if run is None:
        print(f"running: {shown(cmd)}", flush=True)
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{shown(cmd)} failed ({proc.returncode}):\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        found = [line.split(":", 1)[1].strip() for line in proc.stdout.splitlines()
                 if line.startswith("run directory:")]
        run = Run(Path(found[0])) if found else None
        if run is None or run.status().get("state") != "finished":
            raise RuntimeError(f"{shown(cmd)} exited 0 but its run did not finish:\n{proc.stdout[-1500:]}")
    else:
        print(f"reusing {run.path} for: {shown(cmd)}", flush=True)
    return {"dataset": dataset, "epochs": epochs, "seed": seed, "head": head, "command": shown(cmd),
            **result(run)}


def pct(x: float) -> str:
    return f"{100 * x:.2f}"


def mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return pct(values[0])
    return f"{pct(statistics.mean(values))} ± {pct(statistics.stdev(values))}"


def verdict(rows: list[dict]) -> list[str]:
    """One line per dataset: which head had the higher test accuracy, by how much, on how many seeds."""
    out = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        by = {(r["head"], r["seed"]): r for r in rows if r["dataset"] == dataset}
        seeds = sorted({seed for head, seed in by if (("bidir", seed) in by and ("last", seed) in by)})
        if not seeds:
            continue
        test = [by["bidir", s]["test_acc"] - by["last", s]["test_acc"] for s in seeds]
        val = [by["bidir", s]["val_acc_final"] - by["last", s]["val_acc_final"] for s in seeds]
        winner = "bidir" if statistics.mean(test) > 0 else "last"
        dv = 100 * statistics.mean(val)
        wins = sum(1 for d in test if (d > 0) == (winner == "bidir") and d != 0)
        out.append(f"- **{dataset}: `{winner}`** by {abs(100 * statistics.mean(test)):.2f} test-accuracy points "
                   f"on average (higher on {wins} of {len(seeds)} seeds); final validation accuracy "
                   f"{'+' if dv >= 0 else '−'}{abs(dv):.2f} points for bidir.")
    return out


def header_lines(rows: list[dict], args) -> list[str]:
    """The title, when and where it was measured, the two heads, the verdict and what else was fixed."""
    first = time.strftime("%Y-%m-%d %H:%M", time.localtime(min(r["started"] for r in rows)))
    last = time.strftime("%H:%M %Z", time.localtime(max(r["ended"] for r in rows)))
    return [
        "# Head study: `bidir` vs `last`",
        "",
        f"Measured {first} to {last} on {cpu_model()} ({os.cpu_count()} CPUs), device cpu, torch "
        f"{torch.__version__}, Python {platform.python_version()}; {args.jobs} run(s) at a time"
        + (f", OMP_NUM_THREADS={args.threads}" if args.threads else ", torch's default thread count")
        + f", {sum(r['minutes'] for r in rows):.0f} min of training in all. Generated by "
        "`benchmarks/experiments/heads.py` (the command lines are at the end).",
        "",
        "- `bidir`: forward state after the last row + backward state after the first row (both directions "
        "have read the whole image).",
        "- `last`: the blog's `out[:, -1, :]`; the last layer's backward half has run only one step, on the last "
        "row (it sees the rest of the image only through the layer below).",
        "",
        "## Which head wins",
        "",
        *verdict(rows),
        "",
        "Everything else is the default TrainConfig (hidden 128, 2 layers, batch 100, Adam lr 0.01, 10% of the "
        "training set held out for validation). Val accuracy is after the last epoch (and the best epoch); test "
        "accuracy is measured with best.pt (lowest validation loss) on the dataset's test set "
        "(mnist-sample: 500 held-out digits; fashion-mnist: 10,000 images).",
    ]


def summary_lines(rows: list[dict]) -> list[str]:
    """Mean ± standard deviation per dataset, epochs and head, with bidir's paired difference per seed."""
    lines = [
        "## Summary (mean ± standard deviation over seeds, in %)",
        "",
        "| dataset | epochs | seeds | head | val acc (final) | test acc | test acc, bidir − last |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["epochs"]), {}).setdefault(r["head"], []).append(r)
    for (dataset, epochs), by_head in groups.items():
        for head in HEADS:
            rs = by_head.get(head, [])
            if not rs:
                continue
            diff = ""
            if head == "bidir" and "last" in by_head:
                paired = {r["seed"]: r["test_acc"] for r in by_head["last"]}
                deltas = [r["test_acc"] - paired[r["seed"]] for r in rs if r["seed"] in paired]
                if deltas:
                    diff = f"{'+' if statistics.mean(deltas) >= 0 else ''}{pct(statistics.mean(deltas))} points " \
                           f"(per seed: {', '.join(('+' if d >= 0 else '') + pct(d) for d in deltas)})"
            lines.append(f"| {dataset} | {epochs} | {', '.join(str(r['seed']) for r in rs)} | {head} | "
                         f"{mean_sd([r['val_acc_final'] for r in rs])} | {mean_sd([r['test_acc'] for r in rs])} | "
                         f"{diff} |")
    return lines


def run_lines(rows: list[dict]) -> list[str]:
    """Every run, then the command lines that made them."""
    lines = [
        "## Every run",
        "",
        "| dataset | epochs | seed | head | val acc final | val acc best | test acc | minutes | run id |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['epochs']} | {r['seed']} | {r['head']} | {pct(r['val_acc_final'])} | "
                     f"{pct(r['val_acc_best'])} | {pct(r['test_acc'])} | {r['minutes']:.1f} | {r['run_id']} |")
    lines += ["", "## Commands", "", "```"]
    lines += [r["command"] for r in rows]
    return lines + ["```", ""]


def write_markdown(path: Path, rows: list[dict], args) -> None:
    path.write_text("\n".join([*header_lines(rows, args), "", *summary_lines(rows), "", *run_lines(rows)]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("/tmp/headruns"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/heads.md"))
    parser.add_argument("--only", action="append", default=[], help="dataset(s) of the plan to run")
    parser.add_argument("--seeds", type=int, default=None, help="use only the first N seeds of each dataset")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for each run")
    parser.add_argument("--smoke", action="store_true", help="1 epoch of hidden 8 per head, seed 0, a temp folder")
    args = parser.parse_args(argv)
    plan, extra = PLAN, ()
    if args.smoke:
        plan, extra = [("mnist-sample", 1, (0,))], SMOKE_SETS
        args.runs_dir = Path(tempfile.mkdtemp(prefix="heads-smoke-"))
        args.out = args.runs_dir / "heads.md"
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    keys = [(dataset, epochs, seed, head) for dataset, epochs, seeds in plan
            if not args.only or dataset in args.only for seed in seeds[:args.seeds] for head in HEADS]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda k: train_one(args.runs_dir, k, env, extra), keys))
    write_markdown(args.out, rows, args)
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
