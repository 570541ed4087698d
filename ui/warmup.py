"""A fresh server's first contact: a message while PyTorch loads, and the default dataset's pen-stroke copies
of training digits made in the background (`python -m brnn_core predraw`, a job of the shared registry that waits
for the CPU like a run), with their progress on the Train page.

Only streamlit is imported at module level: this runs before the first page can draw anything.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import streamlit as st


def first_paint() -> None:
    """On a server's first page PyTorch is not loaded yet (seconds): say so instead of a blank page.

    The slot is made on every run, empty after the first: a page whose elements moved by one place between
    its first and second run would lose what the browser holds for them (an open expander closes)."""
    box = st.empty()
    if "torch" in sys.modules:
        return
    box.info("Starting up: loading PyTorch, once per server…", icon=":material/hourglass_top:")
    import brnn_core.config  # noqa: F401 (torch and the model code: what every page imports first)

    box.empty()


@dataclass
class Predraw:
    dataset: str
    proc: subprocess.Popen
    log: Path

    def running(self) -> bool:
        return self.proc.poll() is None  # polling also reaps the process once it ended


@st.cache_resource(show_spinner=False)
def predraw(runs_dir: str, data_dir: str) -> Predraw | None:
    """Once per server: start making the default dataset's pen-stroke copies (None when there is nothing to make)."""
    from brnn_core.config import TrainConfig
    from brnn_core.data.datasets import default_dataset
    from brnn_core.data.predraw import needed
    from ui.common import registry

    dataset, share = default_dataset(Path(data_dir)), TrainConfig().drawn_share
    if not needed(dataset, Path(data_dir), share):
        return None
    try:  # in the server's process group (own_session False): Ctrl-C ends both
        job, proc = registry().tool(Path(runs_dir), "predraw", "cpu", lambda job: [dataset, "--data-dir", data_dir,
                                    "--share", f"{share:g}"], title=f"pen-stroke drawing of {dataset}",
                                    own_session=False)
    except OSError:
        return None  # an unwritable runs folder: the first run draws them itself, with its progress
    return Predraw(dataset, proc, job.path / "job.log")


def start_predraw() -> None:
    """Call on every page run: the first one starts the background pen-stroke copies."""
    from brnn_core.data.datasets import default_data_dir
    from brnn_core.runs.rundir import default_runs_dir

    job = predraw(str(default_runs_dir()), str(default_data_dir()))
    if job is not None:
        job.running()


def predraw_progress(runs_dir: Path, data_dir: Path) -> None:
    """While the pen-stroke copies are made: their progress, updated every second (a fragment); then nothing."""
    from brnn_core.data.predraw import last_progress

    slot = st.container()  # always one element here, running or not: the page's next elements keep their place
    job = predraw(str(runs_dir), str(data_dir))
    if job is None or not job.running():
        return

    @st.fragment(run_every=1.0)
    def panel() -> None:
        if not job.running():
            st.rerun(scope="app")  # done: the page without this panel (and its one-second poll)
        line, done, total = last_progress(job.log) or ("loading the dataset", 0, 0)
        st.progress(done / total if total else 0.0,
                    text=f"Getting {job.dataset} ready for its first run: {line}. A run started now waits for it.")

    with slot:
        panel()
