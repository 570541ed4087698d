"""The Train page's Find a learning rate (ui/lr_finder.py), in AppTest with a real lr-find process: the button,
the progress, the curve with its suggestion, and Use this lr filling the form."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import no_exception, open_page

from brnn_core.runs.job_queue import JOBS_DIR
from brnn_core.runs.rundir import Run
from ui.lr_finder import _JOB


@pytest.mark.worker
def test_find_a_learning_rate_and_use_it(dirs, monkeypatch, idx_data):
    runs_dir, _ = dirs
    monkeypatch.setenv("BRNN_DATA_DIR", str(idx_data))  # mnist as IDX files: the test loads in milliseconds
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    at = open_page("pages/train.py", "Train a recurrent network")
    for name, value in (("hidden_size", 16), ("num_layers", 1), ("cpu_threads", 1)):
        at.number_input(key=f"w_{name}").set_value(value)
    at.run()
    next(b for b in at.button if b.label == "Find a learning rate").click().run()
    no_exception(at)
    job = at.session_state[_JOB]
    assert job["proc"].wait(timeout=300) == 0, Path(job["log"]).read_text()[-2000:]
    at.run()
    no_exception(at)
    assert any("Learning-rate range test" in c.proto.spec for c in at.get("plotly_chart"))
    use = next(b for b in at.button if b.label.startswith("Use this lr"))
    suggested = float(use.label.split("(")[1].rstrip(")"))
    assert 1e-5 < suggested < 1
    use.click().run()
    no_exception(at)
    assert at.number_input(key="w_lr").value == pytest.approx(suggested)
    assert not any((runs_dir / p).is_dir() and (runs_dir / p / "config.json").exists() for p in
                   (x.name for x in runs_dir.iterdir()))  # no run was created
    (job,) = (runs_dir / JOBS_DIR).glob("lr-find-*")  # a job of the queue, which took its turn and ended
    assert Run(job).status()["state"] == "finished" and Run(job).status()["started"]  # it had its turn
