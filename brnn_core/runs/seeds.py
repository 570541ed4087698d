"""A seed group started at once: "0,1,2" -> one run per seed, the same settings otherwise (`train --seeds`, the
Train form's Seeds field). The runs form one group by their settings (index.seed_group), however they started.
"""

from __future__ import annotations

from brnn_core.config import TrainConfig

MAX_SEEDS = 100  # more is almost surely a typo: each seed is a whole training run


class SeedsError(ValueError):
    """Seeds text that does not name distinct whole numbers; the message says how to write it."""


def parse_seeds(text: str) -> list[int]:
    """'0, 1,2' -> [0, 1, 2], in the order given; SeedsError for anything else."""
    example = "write whole numbers separated by commas, e.g. 0,1,2"
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise SeedsError(f"no seeds given: {example}")
    seeds: list[int] = []
    low, high = TrainConfig.__dataclass_fields__["seed"].metadata["range"]
    for part in parts:
        if not (part.isascii() and part.isdigit()):  # digits only: no signs, no decimals, nothing evaluated
            raise SeedsError(f"{part!r} is not a seed: {example}" if part else f"an empty seed between commas: "
                             f"{example}")
        seed = int(part)
        if not low <= seed <= high:
            raise SeedsError(f"seed {seed} is out of range: use {low} to {high}")
        if seed in seeds:
            raise SeedsError(f"seed {seed} is given twice: give each seed once (the same seed trains the same run)")
        seeds.append(seed)
    if len(seeds) > MAX_SEEDS:
        raise SeedsError(f"{len(seeds)} seeds: give at most {MAX_SEEDS} (each seed is a whole run)")
    return seeds


def seed_configs(cfg: TrainConfig, seeds: list[int]) -> list[TrainConfig]:
    """`cfg` once per seed, in the order given."""
    return [cfg.replace(seed=seed) for seed in seeds]
