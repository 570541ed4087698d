"""The Train page's **Find a learning rate**: `python -m brnn_core lr-find` on the form's settings as a job of the
shared registry (it waits for its device like a run), its progress, the loss against lr with the suggestion
marked, and **Use this lr**, which fills the form."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from brnn_core import charts
from brnn_core.config import TrainConfig
from brnn_core.fileio import atomic_write_json, read_json
from ui.common import registry
from ui.state import fill_train_form

_JOB = "lr_find_job"


def _start(config: TrainConfig, runs_dir: Path, data_dir: Path) -> None:
    def args(job) -> list[str]:
        atomic_write_json(job.path / "train.json", config.to_dict())
        return ["--config", str(job.path / "train.json"), "--out", str(job.path / "curve.csv"),
                "--data-dir", str(data_dir)]

    job, proc = registry().tool(runs_dir, "lr-find", config.device, args, data_dir=data_dir, title="lr range test")
    st.session_state[_JOB] = {"out": str(job.path / "curve.csv"), "log": str(job.path / "job.log"), "proc": proc}


def _use(lr: float, data_dir: Path) -> None:
    fill_train_form({"lr": float(f"{lr:.2g}")}, data_dir)


def lr_finder_panel(config: TrainConfig | None, runs_dir: Path, data_dir: Path, *, training: bool) -> None:
    """The button, then the running test's progress or its result."""
    job = st.session_state.get(_JOB)
    running = job is not None and job["proc"].poll() is None
    st.button("Find a learning rate", icon=":material/query_stats:", disabled=config is None or running,
              on_click=_start, args=(config, runs_dir, data_dir),
              help="An lr range test on a throwaway copy of this model (a few hundred steps, the lr growing from "
                   "1e-6 to 1): the loss against lr, and a suggested peak lr. Same as `python -m brnn_core lr-find`."
                   + (" A run is training: the test waits for its device in the queue." if training else ""))
    if job is not None:
        st.fragment(run_every=1.0 if running else None)(_result)(data_dir, running)


def _result(data_dir: Path, was_running: bool) -> None:
    """The test's progress while it runs (this fragment alone reruns every second), then its result."""
    job = st.session_state.get(_JOB)
    if job is None:
        return
    if job["proc"].poll() is not None and was_running:
        st.rerun()  # it just ended: the whole page, so the button (outside this fragment) is enabled again
    if job["proc"].poll() is None:
        lines = Path(job["log"]).read_text(errors="replace").splitlines() if Path(job["log"]).is_file() else []
        st.caption(f"Learning-rate range test: {lines[-1] if lines else 'starting…'}")
        return
    out = Path(job["out"])
    summary = read_json(out.with_suffix(".json"))
    if job["proc"].returncode != 0 or not isinstance(summary, dict) or not out.is_file():
        tail = Path(job["log"]).read_text(errors="replace").strip().splitlines()[-1:] if Path(job["log"]).is_file() \
            else []
        st.error(f"The lr range test failed: {tail[0] if tail else 'no output'}")
        return
    curve = pd.read_csv(out)
    suggestion = summary.get("suggestion")
    st.plotly_chart(charts.lr_find_figure(list(curve["lr"]), list(curve["loss"]), list(curve["smoothed_loss"]),
                                          suggestion), key="lr_find_chart", on_select="ignore")
    if suggestion is None:
        st.caption("No suggestion: the loss never fell over the range.")
        return
    st.caption(f"Suggested peak lr **{suggestion:.2g}**: {summary.get('rule')}. A starting point, not a promise: "
               "check it with a run (or a few seeds).")
    st.button(f"Use this lr ({suggestion:.2g})", on_click=_use, args=(suggestion, data_dir), key="lr_find_use")

