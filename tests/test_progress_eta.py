"""The time left of a training run: one estimator (runs.progress.Pace) for the CLI's progress line and the Train
page, from the recent pace over a minute of logged points, so a busy machine's uneven steps, a validation pass
or a pause do not make it jump (it read the latest 10 steps' speed: 1:12 -> 2:05 -> 1:03 within seconds)."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout

import numpy as np

from brnn_core.runs.progress import Pace, ProgressPrinter, progress_text

TOTAL = 6000  # steps
LOG = 10  # steps between logged points


def uneven_run(seed: int = 0):
    """(step, elapsed_s, last interval's samples/s) of every logged point of a run on a shared machine: each 10
    steps take 0.4 s or 1.2 s at random (batch 100), with a 20 s pause at step 2000 and a 5 s validation pass
    every 1000 steps."""
    rng = np.random.default_rng(seed)
    elapsed, out = 0.0, []
    for step in range(LOG, TOTAL + 1, LOG):
        took = float(rng.choice([0.4, 1.2]))
        elapsed += took + (20.0 if step == 2000 + LOG else 0.0) + (5.0 if step % 1000 == LOG else 0.0)
        out.append((step, elapsed, LOG * 100 / took))
    return out


def status_at(step: int, samples_per_s: float, elapsed: float) -> dict:
    return {"state": "running", "step": step, "total_steps": TOTAL, "epoch": step // 1000, "live": {"epochs": 6},
            "samples_per_s": samples_per_s, "elapsed_s": elapsed}


def eta_seconds_in(text: str) -> int:
    h, m, s = re.search(r"ETA (\d+):(\d\d):(\d\d)", text).groups()
    return 3600 * int(h) + 60 * int(m) + int(s)


def test_the_page_eta_moves_smoothly_on_an_uneven_machine():
    points = uneven_run()
    pace = Pace()
    shown = []
    for k, (step, elapsed, sps) in enumerate(points):
        pace.add(step, elapsed)
        if k % 4 == 0 and elapsed > 90:  # the page redraws every few seconds (3 s: about four points here)
            shown.append((elapsed, eta_seconds_in(progress_text(status_at(step, sps, elapsed), 100, pace))))
    for (t0, eta0), (t1, eta1) in zip(shown, shown[1:], strict=False):
        # between two redraws the time left falls by about the time passed, never jumps by a large part of it
        assert abs((eta0 - (t1 - t0)) - eta1) <= 0.1 * eta0 + 5, (t0, eta0, t1, eta1)
    mean_step = np.mean([0.4, 1.2]) / LOG
    step, elapsed, sps = points[len(points) // 2]
    assert abs(eta_seconds_in(progress_text(status_at(step, sps, elapsed), 100, Pace.from_points(
        [p[0] for p in points[:len(points) // 2 + 1]], [p[1] for p in points[:len(points) // 2 + 1]])))
        - (TOTAL - step) * mean_step) < 0.35 * (TOTAL - step) * mean_step


def test_the_cli_and_the_page_say_the_same_eta():
    points = uneven_run(seed=1)[:300]
    printer, out = ProgressPrinter(), io.StringIO()
    printer.tty = False
    with redirect_stdout(out):
        for step, elapsed, sps in points:
            printer.last = 0.0  # print every line (a terminal's line is redrawn each log)
            printer("log", {"steps_done": step, "total_steps": TOTAL, "elapsed_s": elapsed, "samples_per_s": sps,
                            "loss": 0.5, "epoch": 0, "live": {"epochs": 6}})
    cli_eta = eta_seconds_in(out.getvalue().splitlines()[-1])
    step, elapsed, sps = points[-1]
    page = Pace.from_points([p[0] for p in points], [p[1] for p in points])
    assert eta_seconds_in(progress_text(status_at(step, sps, elapsed), 100, page)) == cli_eta


def test_a_resumed_run_and_a_run_without_points_still_have_an_eta():
    pace = Pace.from_points([10, 20, 30, 20, 30, 40], [1.0, 2.0, 3.0, 4.5, 5.5, 6.5])  # resumed from step 10
    assert pace.seconds_per_step() == 0.1 and pace.seconds_left(40, 100) == 6.0
    assert Pace().seconds_left(0, 100) is None
    status = status_at(100, 1000.0, 10.0)  # no pace yet: the speed in status.json
    assert eta_seconds_in(progress_text(status, 100, Pace())) == (TOTAL - 100) * 100 // 1000
