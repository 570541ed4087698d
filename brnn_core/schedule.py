"""Learning-rate schedules: the lr of every step as a pure function of (step, planned steps, peak).

`cosine` warms up from a tenth of the peak over WARMUP_SHARE of the planned steps, then follows half a cosine
down to FLOOR x the peak at the last one; `constant` keeps the peak (the blog's recipe, which never settles:
docs/decisions/009-training-recipe.md). Because only the step, the planned steps and the peak count, a resumed
run continues exactly where it was, a live lr change sets a new peak that rescales the rest, and a live change
of the total epochs re-plans the decay.
"""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "constant")
WARMUP_SHARE = 0.05  # of the planned steps
WARMUP_START = 0.1  # the first step's lr, as a share of the peak
FLOOR = 0.01  # the last planned step's lr, as a share of the peak


def lr_factor(schedule: str, step: int, total_steps: int) -> float:
    """The lr at `step` as a share of the peak (steps count from 0; past the plan it stays at the floor)."""
    if schedule == "constant" or total_steps <= 1:
        return 1.0
    warmup = max(1, round(WARMUP_SHARE * total_steps))
    if step < warmup:
        return WARMUP_START + (1.0 - WARMUP_START) * step / warmup
    done = min(1.0, (step - warmup) / max(1, total_steps - 1 - warmup))
    return FLOOR + (1.0 - FLOOR) * 0.5 * (1.0 + math.cos(math.pi * done))


def lr_at(schedule: str, peak: float, step: int, total_steps: int) -> float:
    return peak * lr_factor(schedule, step, total_steps)


def planned_lr(schedule: str, peak: float, epochs: int, steps_per_epoch: int, changes: list[tuple[int, str, float]],
               *, start: int = 0, points: int = 200) -> tuple[list[int], list[float]]:
    """The whole run's lr, past and planned: (steps, lrs) from `start` to the last planned step.

    `changes` are the live changes of "lr" (a new peak) and "epochs" (a new plan) as (step, field, new
    value), in order. The result changes only when one of those does, not with every logged step, so a
    live chart drawn from it is redrawn only then."""
    steps: list[int] = []
    lrs: list[float] = []
    bounds = [c for c in changes if c[1] in ("lr", "epochs") and c[0] >= start] + [(None, "", 0.0)]
    segment_start = start
    for step, name, value in bounds:
        total = epochs * steps_per_epoch
        end = total if step is None else min(step, total)
        if end > segment_start:
            stride = max(1, (end - segment_start) // points)
            xs = list(range(segment_start, end, stride)) + [end - 1]
            steps += xs
            lrs += [lr_at(schedule, peak, s, total) for s in xs]
        if step is None:
            break
        segment_start = max(segment_start, step)
        peak, epochs = (value, epochs) if name == "lr" else (peak, int(value))
    return steps, lrs
