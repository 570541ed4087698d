"""Where bf16 autocast loses accuracy: fp32 against bf16 variants of the autocast boundary, per seed.

    python -m benchmarks.experiments.amp_variants --seeds 0 1 2 3 4 [--variants fp32 bf16-whole bf16-boundary auto]
    python -m benchmarks.experiments.amp_variants --smoke     # a tiny run per variant: the code path only

Each seed trains the defaults (5 epochs, mnist-sample) through `train_run_dir`, variants alternated within a seed;
best.pt is scored in fp32 on the real MNIST test digits (--test: only measured, never trained or chosen on) and
on benchmarks/drawn_digits.py's set; speed is the median train samples/s of metrics.csv. Decision:
docs/decisions/016-amp-auto.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from benchmarks import drawn_digits
from benchmarks.handwriting import DEFAULT_TEST, mnist_test, train
from brnn_core.devices import cpu_has_bf16
from brnn_core.environment import cpu_model
from brnn_core.model import RecurrentClassifier
from brnn_core.runs.rundir import Run
from brnn_core.training import engine

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
SMOKE_SETS = {"hidden_size": 8, "num_layers": 1, "drawn_share": 0.0}


@contextlib.contextmanager
def whole_model_autocast() -> Iterator[None]:
    """The boundary as it was: the classifier layer under autocast too, and best.pt chosen on bf16 validation."""
    head, val = RecurrentClassifier.head, engine.VALIDATION_AMP
    RecurrentClassifier.head = lambda self, feat: self.fc(feat)
    engine.VALIDATION_AMP = "bf16"
    try:
        yield
    finally:
        RecurrentClassifier.head, engine.VALIDATION_AMP = head, val


@contextlib.contextmanager
def bf16_validation() -> Iterator[None]:
    """The shipped boundary (classifier layer in fp32) but best.pt chosen on bf16 validation."""
    val = engine.VALIDATION_AMP
    engine.VALIDATION_AMP = "bf16"
    try:
        yield
    finally:
        engine.VALIDATION_AMP = val


# name -> (amp, the code change for the run: none = the engine as shipped)
VARIANTS: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager]]] = {
    "fp32": ("off", contextlib.nullcontext),
    "bf16-whole": ("bf16", whole_model_autocast),
    "bf16-head32": ("bf16", bf16_validation),
    "bf16-boundary": ("bf16", contextlib.nullcontext),
    "auto": ("auto", contextlib.nullcontext),  # the default: bf16-boundary where the CPU runs bf16, else fp32
}


def train_samples_per_s(run: Run) -> float:
    m = run.metrics()
    return float(m.loc[m["split"] == "train", "samples_per_s"].median())


def one(variant: str, seed: int, sets: dict, epochs: int, test: Path, drawn: list, limit: int | None) -> dict:
    """One trained run's scores; `drawn` holds (canvases, labels) per render seed, the first one the named bench."""
    amp, change = VARIANTS[variant]
    with tempfile.TemporaryDirectory(prefix="brnn-amp-") as tmp, change():
        ckpt, s_per_epoch = train(seed, {**sets, "amp": amp}, epochs, Path(tmp))
        run = Run(ckpt.parent.parent)
        renders = [drawn_digits.score(ckpt, *d)["accuracy"] for d in drawn]
        row = {"variant": variant, "seed": seed, "mnist_test": mnist_test(ckpt, test) if limit is None else
               mnist_test_limited(ckpt, test, limit), "drawn": renders[0],
               "samples_per_s": train_samples_per_s(run), "s_per_epoch": s_per_epoch,
               "recorded_amp": run.config().get("amp")}
        if len(renders) > 1:  # the same digits drawn again: less of the score hangs on one brush's luck
            row["drawn_redrawn"] = statistics.mean(renders)
        return row


def mnist_test_limited(ckpt: Path, test: Path, limit: int) -> float:
    from brnn_core.checkpoint import load_checkpoint

    x, y = drawn_digits.npz_digits(test)
    return engine.evaluate(load_checkpoint(ckpt).build_model("cpu"), torch.from_numpy(x[:limit]),
                           torch.from_numpy(y[:limit])).accuracy


def summary(rows: list[dict], variant: str, fp32: dict[int, dict]) -> str:
    mine = [r for r in rows if r["variant"] == variant]
    parts = [f"{variant:14s} n={len(mine)}"]
    for key in ("mnist_test", "drawn", "drawn_redrawn"):
        values = [100 * r[key] for r in mine if key in r]
        if not values:
            continue
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        paired = [100 * (r[key] - fp32[r["seed"]][key]) for r in mine if r["seed"] in fp32]
        diff = f" (paired vs fp32 {statistics.mean(paired):+.2f})" if paired and variant != "fp32" else ""
        parts.append(f"{key} {statistics.mean(values):.2f} ± {sd:.2f}{diff}")
    parts.append(f"samples/s median {statistics.median(r['samples_per_s'] for r in mine):,.0f}")
    return "  ".join(parts)


def speed(variants: list[str], rounds: int, steps: int) -> dict[str, list[float]]:
    """Train samples/s of each variant's engine step on mnist-sample, alternated rounds (fresh models, seed 0)."""
    from benchmarks.harness.rows import alternate
    from benchmarks.harness.sides import EngineTrainer
    from brnn_core.data.loading import load_dataset

    ds = load_dataset("mnist-sample")
    trainers = {v: EngineTrainer(ds.train_x, ds.train_y, torch.device("cpu"), amp=VARIANTS[v][0]) for v in variants}

    def measure(variant: str) -> float:
        with VARIANTS[variant][1]():
            return trainers[variant].samples_per_s(steps)

    for v in variants:
        measure(v)  # warm-up: oneDNN builds its kernels on the first steps
    return alternate({v: (lambda v=v: measure(v)) for v in variants}, rounds, print, "speed ")


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["fp32", "bf16-whole", "bf16-boundary"])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--test", type=Path, default=DEFAULT_TEST, help="an .npz of real MNIST test digits")
    ap.add_argument("--out", type=Path, help="results JSON (default experiments/results/<date>_amp_variants.json)")
    ap.add_argument("--smoke", action="store_true", help="a tiny 1-epoch model per variant, 200 test digits")
    ap.add_argument("--speed-rounds", type=int, default=0, help="then this many alternated speed rounds per variant")
    ap.add_argument("--speed-steps", type=int, default=40, help="training steps (batch 100) per speed measurement")
    ap.add_argument("--speed-only", action="store_true", help="skip the training runs")
    ap.add_argument("--redraws", type=int, default=1,
                    help="score the drawn digits drawn with this many render seeds too (drawn_redrawn: their mean)")
    args = ap.parse_args(argv)
    sets, limit, drawn_step = ({}, None, 1) if not args.smoke else (SMOKE_SETS, 200, 10)
    if args.smoke:
        args.seeds, args.epochs = args.seeds[:1], 1
    variants = [v for v in args.variants if VARIANTS[v][0] in ("off", "auto") or cpu_has_bf16()]
    for skipped in sorted(set(args.variants) - set(variants)):
        print(f"skipped {skipped}: this CPU lacks native bf16 (AVX512-BF16 or AMX)")
    digits, labels = drawn_digits.bench_digits()
    digits, labels = digits[::drawn_step], labels[::drawn_step]
    drawn = [(drawn_digits.drawn_set(digits, render_seed), labels) for render_seed in range(args.redraws)]
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit(), "cpu": cpu_model(),
            "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
            "epochs": args.epochs, "sets": sets, "test": str(args.test), "redraws": args.redraws}
    out = args.out or (Path(tempfile.gettempdir()) if args.smoke else RESULTS) / \
        f"{time.strftime('%Y-%m-%d_%H%M%S')}_amp_variants.json"
    rows: list[dict] = []
    for seed in [] if args.speed_only else args.seeds:
        order = variants if seed % 2 == 0 else variants[::-1]  # alternated: no variant always runs first
        for variant in order:
            rows.append(one(variant, seed, sets, args.epochs, args.test, drawn, limit))
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()}, flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    fp32 = {r["seed"]: r for r in rows if r["variant"] == "fp32"}
    print(f"\n{meta['cpu']}, {meta['threads']} threads, torch {meta['torch']}, {args.epochs} epochs; {out}")
    for variant in variants if rows else []:
        print(summary(rows, variant, fp32))
    if args.speed_rounds:
        fast = speed(variants, args.speed_rounds, 2 if args.smoke else args.speed_steps)
        meta["speed"] = {"rounds": args.speed_rounds, "steps": args.speed_steps, "samples_per_s": fast}
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        for v, values in fast.items():
            print(f"speed {v:14s} median {statistics.median(values):,.0f} samples/s "
                  f"({min(values):,.0f}-{max(values):,.0f}, {len(values)} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
