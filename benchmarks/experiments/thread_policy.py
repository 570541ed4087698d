"""Which OpenMP/torch thread settings train fastest, alone and next to other work?

    python -m benchmarks.experiments.thread_policy [--rounds 3] [--steps 60] [--settings 1,2,2-passive,2-spin1k]
    python -m benchmarks.experiments.thread_policy --smoke     # one round, one setting, no load: the code path

Each setting (SETTINGS: threads and libgomp's wait policy, read once when torch loads) is a fresh training process;
each load (none, a core burnt, a 30 %-bursty program, a twin training) runs beside it; rounds alternate every pair.
Prints samples/s per pair and writes JSON. Decision: docs/decisions/007-cpu-threads.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"

SETTINGS = {
    "1": {"threads": 1, "env": {}},
    "2": {"threads": 2, "env": {}},
    "2-passive": {"threads": 2, "env": {"OMP_WAIT_POLICY": "PASSIVE"}},
    "2-spin1k": {"threads": 2, "env": {"GOMP_SPINCOUNT": "1000"}},
    "2-spin10k": {"threads": 2, "env": {"GOMP_SPINCOUNT": "10000"}},
    "2-spin30k": {"threads": 2, "env": {"GOMP_SPINCOUNT": "30000"}},
    "2-spin100k": {"threads": 2, "env": {"GOMP_SPINCOUNT": "100000"}},
    "1-passive": {"threads": 1, "env": {"OMP_WAIT_POLICY": "PASSIVE"}},
}
LOADS = ("none", "spinner", "bursty", "twin")

CHILD = r"""
import json, sys, time, torch
from brnn_core.training.allocator import tune_malloc
from benchmarks.harness.sides import EngineTrainer
from brnn_core.data.datasets import DatasetError
from brnn_core.data.loading import load_dataset
tune_malloc()
torch.set_num_threads(int(sys.argv[1]))
try:
    ds = load_dataset("fashion-mnist", download=False)
except DatasetError:
    ds = load_dataset("mnist-sample", download=False)
t = EngineTrainer(ds.train_x, ds.train_y, torch.device("cpu"))
t.run(5)
print("ready", flush=True)
sys.stdin.readline()  # go
samples, seconds = t.run(int(sys.argv[2]))
print(json.dumps({"samples_per_s": samples / seconds, "threads": torch.get_num_threads()}), flush=True)
"""

SPINNER = "while True: pass"
BURSTY = r"""
import time
while True:
    t = time.perf_counter() + 0.03
    while time.perf_counter() < t: pass
    time.sleep(0.07)
"""


def start_trainer(setting: str, steps: int) -> subprocess.Popen:
    spec = SETTINGS[setting]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    env.update(spec["env"], OMP_NUM_THREADS=str(spec["threads"]))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(spec["threads"]), str(steps)], env=env, cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"trainer {setting} failed to start (exit {proc.wait()})")
    return proc


def measure(setting: str, load: str, steps: int) -> list[float]:
    """samples/s of each timed trainer for one (setting, load) pair."""
    trainers = [start_trainer(setting, steps) for _ in range(2 if load == "twin" else 1)]
    other = None
    if load in ("spinner", "bursty"):
        other = subprocess.Popen([sys.executable, "-c", SPINNER if load == "spinner" else BURSTY])
        time.sleep(0.5)
    try:
        for t in trainers:
            t.stdin.write("go\n")
            t.stdin.flush()
        return [json.loads(t.stdout.readline())["samples_per_s"] for t in trainers]
    finally:
        if other is not None:
            other.kill()
            other.wait()
        for t in trainers:
            t.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--settings", default="1,2,2-passive,2-spin1k")
    parser.add_argument("--loads", default=",".join(LOADS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="1 round of 5 steps, 1 thread, no load; no file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.steps, args.settings, args.loads = 1, 5, "1", "none"
    settings = [s for s in args.settings.split(",") if s]
    loads = [s for s in args.loads.split(",") if s]
    bad = [s for s in settings if s not in SETTINGS] + [s for s in loads if s not in LOADS]
    if bad:
        print(f"error: unknown {', '.join(bad)}; settings: {', '.join(SETTINGS)}; loads: {', '.join(LOADS)}",
              file=sys.stderr)
        return 2
    results: dict[str, list] = {}
    for r in range(args.rounds):
        for load in loads:
            for setting in settings:
                la = os.getloadavg()[0]
                values = measure(setting, load, args.steps)
                results.setdefault(f"{setting}|{load}", []).append({"values": values, "load_1min": round(la, 2)})
                print(f"round {r + 1} {load:>8} {setting:>10}: "
                      + " + ".join(f"{v:,.0f}" for v in values) + f" samples/s (load {la:.2f})", flush=True)
    print("\nmedian samples/s (per process; twin: each of the two, and their sum)")
    summary = {}
    for key, rounds in results.items():
        setting, load = key.split("|")
        per = [v for rnd in rounds for v in rnd["values"]]
        total = [sum(rnd["values"]) for rnd in rounds]
        summary[key] = {"median": statistics.median(per), "min": min(per), "max": max(per),
                        "aggregate_median": statistics.median(total)}
        extra = f"  aggregate {summary[key]['aggregate_median']:,.0f}" if load == "twin" else ""
        print(f"  {load:>8} {setting:>10}: {summary[key]['median']:8,.0f}  ({min(per):,.0f} - {max(per):,.0f}){extra}")
    if args.smoke:
        return 0
    out = args.json or RESULTS / f"{time.strftime('%Y-%m-%d_%H%M%S')}_thread_policy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": os.cpu_count(),
                               "steps": args.steps, "rounds": results, "summary": summary}, indent=2) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
