"""The Sweep page with hundreds of trials: first render and rerun times (AppTest, no browser).

    .venv/bin/python -m benchmarks.sweep_page --trials 200

`make_sweep` writes one finished sweep of N trials (ordinary run directories with 3 epochs of metrics and a
sweep.json, as a real sweep leaves them; no training); the Sweep page is opened on it and its first render and
reruns (a click, the live refresh) are timed. Target: benchmarks/README.md, "Targets and latest results".
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from brnn_core.config import TrainConfig
from brnn_core.runs.rundir import create_run, new_run_config
from brnn_core.sweep.records import Sweep, sweeps_dir

ROOT = Path(__file__).resolve().parent.parent

SWEEP_ID = "20261201-120000-bench-0000"


def make_sweep(runs_dir: Path, trials: int) -> None:
    ids = []
    for k in range(trials):
        lr = 0.001 * (1 + k % 10)
        cfg = TrainConfig(dataset="mnist-sample", device="cpu", epochs=3, lr=lr, hidden_size=8, num_layers=1)
        config = new_run_config(cfg, runs_dir)
        config.update(sweep_id=SWEEP_ID, sweep={"trial": k, "trial_id": f"{k:05d}", "searched": {"lr": lr},
                                                "scheduler": "fifo", "metric": "val_loss"})
        run = create_run(runs_dir, config, run_id=f"{SWEEP_ID}-t{k:02d}")
        for epoch in (1, 2, 3):
            run.log_metric(step=8 * epoch, epoch=epoch, split="val", loss=2.0 / epoch + lr, accuracy=0.3 * epoch,
                           lr=lr, elapsed_s=float(epoch))
        run.write_status(state="finished", message="finished", step=24, epoch=3, ended=time.time(),
                         live={"lr": lr, "epochs": 3})
        ids.append(run.id)
    folder = sweeps_dir(runs_dir) / SWEEP_ID
    folder.mkdir(parents=True)
    Sweep(folder).write(id=SWEEP_ID, name="bench", state="finished", message="finished", metric="val_loss",
                        scheduler="fifo", address="local", trials=ids, plan={"trials": trials},
                        search={"lr": {"kind": "loguniform", "low": 0.001, "high": 0.01}},
                        best={"run_id": ids[0], "metric": "val_loss", "value": 0.67, "epoch": 3})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--reruns", type=int, default=5)
    args = ap.parse_args(argv)
    from streamlit.testing.v1 import AppTest

    with tempfile.TemporaryDirectory(prefix="brnn-sweep-page-") as tmp:
        runs_dir = Path(tmp) / "runs"
        make_sweep(runs_dir, args.trials)
        os.environ.update(BRNN_RUNS_DIR=str(runs_dir), BRNN_DATA_DIR=str(Path(tmp) / "data"))
        at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=300)
        at.run()
        at.switch_page("pages/sweep.py")
        t0 = time.perf_counter()
        at.run()
        first = time.perf_counter() - t0
        if at.exception:
            raise SystemExit(f"the page failed: {at.exception}")
        reruns = []
        for _ in range(args.reruns):
            t0 = time.perf_counter()
            at.run()
            reruns.append(time.perf_counter() - t0)
        tables = list(at.dataframe)  # the trials table is the page's only one
        if not tables:
            raise SystemExit("no trials table on the page: " + "; ".join(str(e.value)[:200] for e in
                                                                             [*at.info, *at.error, *at.markdown][:6]))
        shown = len(tables[0].value)
    print(f"Sweep page, {args.trials} trials ({shown} in the table): first render {first:.2f} s, rerun median "
          f"{statistics.median(reruns):.3f} s (min {min(reruns):.3f}, max {max(reruns):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
