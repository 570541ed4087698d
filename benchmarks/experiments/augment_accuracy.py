"""Does augmentation help? Test accuracy of short default runs per augmentation level and seed.

    python -m benchmarks.experiments.augment_accuracy --levels off,light,medium,strong --seeds 0,1,2
    python -m benchmarks.experiments.augment_accuracy --smoke     # one tiny run: the code path, not the answer

Each run is `python -m brnn_core train` with only epochs, augment, seed, dataset and one CPU thread set (a fixed
thread count keeps CPU runs reproducible); finished runs in --runs-dir are reused. Test accuracy: the worker's
best.pt on the test split. Decision: docs/decisions/001-augmentation.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from brnn_core.runs.rundir import Run, list_runs

ROOT = Path(__file__).resolve().parents[2]

KEYS = ("dataset", "epochs", "seed", "augment")


def command(runs_dir: Path, settings: dict, extra: tuple[str, ...] = ()) -> list[str]:
    sets = [x for key in KEYS for x in ("--set", f"{key}={settings[key]}")]
    return [sys.executable, "-m", "brnn_core", "train", "--runs-dir", str(runs_dir), *sets,
            "--set", "cpu_threads=1", "--set", "device=cpu", *extra]


def find_finished(runs_dir: Path, settings: dict) -> Run | None:
    for run in list_runs(runs_dir):
        train = run.config().get("train", {})
        if all(train.get(k) == settings[k] for k in KEYS) and run.status().get("state") == "finished":
            return run
    return None


def train(runs_dir: Path, settings: dict, env: dict, extra: tuple[str, ...] = ()) -> dict:
    run = find_finished(runs_dir, settings)
    cmd = command(runs_dir, settings, extra)
    if run is None:
        print("running:", " ".join(cmd[1:]), flush=True)
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        run = find_finished(runs_dir, settings)
        if proc.returncode != 0 or run is None:
            raise RuntimeError(f"failed ({proc.returncode}):\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    status, metrics = run.status(), run.metrics()
    val = metrics[metrics["split"] == "val"].sort_values("step")
    return {**settings, "run_id": run.id, "test_acc": float(status["test_acc"]),
            "val_acc_final": float(val["accuracy"].iloc[-1]), "resolved": run.config().get("augment"),
            "minutes": (float(status["ended"]) - float(status["started"])) / 60}


def summary(rows: list[dict]) -> list[str]:
    lines = ["| augment | seeds | test acc mean ± sd | min – max | per seed | val acc (final) mean |",
             "|---|---|---|---|---|---|"]
    for level in dict.fromkeys(r["augment"] for r in rows):
        rs = [r for r in rows if r["augment"] == level]
        acc = [100 * r["test_acc"] for r in rs]
        sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
        lines.append(f"| {level} | {', '.join(str(r['seed']) for r in rs)} | {statistics.mean(acc):.2f} ± {sd:.2f} "
                     f"| {min(acc):.2f} – {max(acc):.2f} | {', '.join(f'{a:.1f}' for a in acc)} | "
                     f"{100 * statistics.mean(r['val_acc_final'] for r in rs):.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist-sample")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--levels", default="off,light,medium,strong")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--runs-dir", type=Path, default=Path("/tmp/augment-runs"))
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    parser.add_argument("--smoke", action="store_true", help="one tiny run (1 epoch, hidden 8, one level, one seed)")
    args = parser.parse_args(argv)
    extra: tuple[str, ...] = ()
    if args.smoke:
        args.epochs, args.levels, args.seeds = 1, "medium", "0"
        args.runs_dir = Path(tempfile.mkdtemp(prefix="augment-smoke-"))
        extra = ("--set", "hidden_size=8", "--set", "num_layers=1")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):  # seed-major: a partial study still pairs the levels
        for level in args.levels.split(","):
            rows.append(train(args.runs_dir, {"dataset": args.dataset, "epochs": args.epochs, "seed": seed,
                                              "augment": level.strip()}, env, extra))
            print(f"  seed {seed} {level}: test {100 * rows[-1]['test_acc']:.2f}%", flush=True)
    rows.sort(key=lambda r: (args.levels.split(",").index(r["augment"]), r["seed"]))
    if args.json:
        args.json.write_text(json.dumps({"dataset": args.dataset, "epochs": args.epochs, "rows": rows}, indent=1))
    print(f"\n{args.dataset}, {args.epochs} epochs of the defaults, cpu_threads=1:\n")
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
