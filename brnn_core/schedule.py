"""Learning-rate schedules: the lr of every step as a pure function of (step, planned steps).

The form's learning rate is the schedule's peak. `cosine` warms up from a tenth of the peak over the
first WARMUP_SHARE of the planned steps, then follows half a cosine down to FLOOR x the peak at the
last planned step; `constant` keeps the peak throughout (the blog's recipe). A constant lr of 0.01 to
the end never settles: the same model trained on with a smaller lr reads unseen writers' digits
markedly better (docs/decisions/009-training-recipe.md).

Because the lr depends only on the step, the planned steps and the peak:
- a resumed run continues the schedule exactly where it was (the peak is saved with the live settings);
- a live change of the lr sets a new peak, which rescales the rest of the schedule from that step;
- a live change of the total epochs changes the planned steps, which re-plans the decay.
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
