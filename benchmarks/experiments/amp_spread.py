"""Whether bf16's wider drawn-digit spread is one that the seeds can tell from chance: amp_variants' per-seed results.

    python -m benchmarks.experiments.amp_spread [FILE ...] [--seeds 10 11 ...]   # default: the files 016 cites
    python -m benchmarks.experiments.amp_spread --smoke         # the same, 500 bootstrap resamples

For each score (MNIST test, drawn, drawn over several renders) and each seed range: fp32's and the other
variant's mean ± sd, the paired mean difference, the sd ratio (other / fp32) with a bootstrap 95 % interval over
seeds, and the p-values of an F-test, Levene's test and the Pitman–Morgan test of equal spread (the seeds are
paired); the p-values need scipy, the rest numpy only. Decision: docs/decisions/022-amp-auto-default.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / "results"
FILES = ("2026-12-02_164653_amp_variants.json", "2026-12-02_171620_amp_variants.json",
         "2026-12-02_215551_amp_variants.json")
SCORES = ("mnist_test", "drawn", "drawn_redrawn")


def paired(rows: list[dict], other: str, score: str, only: set[int] | None) -> tuple[np.ndarray, np.ndarray, list]:
    """(fp32, other) in % for the seeds (of `only`, if given) both have this score for, and those seeds."""
    by = {v: {r["seed"]: 100 * r[score] for r in rows if r["variant"] == v and score in r} for v in ("fp32", other)}
    seeds = sorted(set(by["fp32"]) & set(by[other]) & (only if only is not None else set(by["fp32"])))
    return np.array([by["fp32"][s] for s in seeds]), np.array([by[other][s] for s in seeds]), seeds


def p_values(a: np.ndarray, b: np.ndarray) -> str:
    try:
        from scipy import stats
    except ImportError:
        return "p-values need scipy"
    n = len(a)
    f = b.var(ddof=1) / a.var(ddof=1)
    p_f = 2 * min(stats.f.cdf(f, n - 1, n - 1), stats.f.sf(f, n - 1, n - 1))
    p_pm = stats.pearsonr(a + b, a - b).pvalue  # Pitman-Morgan: equal variances of paired values
    return f"F p {p_f:.2f}  Levene p {stats.levene(a, b).pvalue:.2f}  Pitman-Morgan p {p_pm:.2f}"


def line(a: np.ndarray, b: np.ndarray, seeds: list[int], score: str, resamples: int) -> str:
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(a), (resamples, len(a)))
    ratios = b[picks].std(axis=1, ddof=1) / a[picks].std(axis=1, ddof=1)
    lo, hi = np.percentile(ratios[np.isfinite(ratios)], [2.5, 97.5])
    diff = b - a
    return (f"{score:14s} seeds {seeds[0]}-{seeds[-1]} (n={len(a)}): fp32 {a.mean():.2f} ± {a.std(ddof=1):.2f}, "
            f"other {b.mean():.2f} ± {b.std(ddof=1):.2f}; paired {diff.mean():+.2f} (se "
            f"{diff.std(ddof=1) / np.sqrt(len(a)):.2f}); sd ratio {b.std(ddof=1) / a.std(ddof=1):.2f} "
            f"[{lo:.2f}, {hi:.2f}]  {p_values(a, b)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="amp_variants results (default: the ones 016 cites)")
    ap.add_argument("--other", default="bf16-boundary", help="the variant compared with fp32")
    ap.add_argument("--seeds", nargs="+", type=int, help="only these seeds (default: every seed both variants have)")
    ap.add_argument("--resamples", type=int, default=20000)
    ap.add_argument("--smoke", action="store_true", help="500 resamples")
    args = ap.parse_args(argv)
    rows = [r for f in args.files or [RESULTS / f for f in FILES] for r in json.loads(Path(f).read_text())["rows"]]
    for score in SCORES:
        a, b, seeds = paired(rows, args.other, score, set(args.seeds) if args.seeds else None)
        if len(seeds) > 2:
            print(line(a, b, seeds, score, 500 if args.smoke else args.resamples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
