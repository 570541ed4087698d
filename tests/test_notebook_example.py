"""docs/notebook.ipynb, executed start to finish in a real Jupyter kernel (nbclient + ipykernel, this interpreter),
so the example cannot rot: it starts a run through the front door, pauses it, changes the lr and the epochs live,
waits for the end and reads the metrics and the figure. A cell after the notebook's `parameters` cell makes the run
TINY (it never ends by itself: the live epochs change ends it) on the IDX copy of mnist-sample.
"""

from __future__ import annotations

import base64

import nbformat
import numpy as np
import pytest
from helpers import REPO, TINY, kill_workers, worker_environ
from nbclient import NotebookClient

from brnn_core.runs.rundir import list_runs

NOTEBOOK = REPO / "docs" / "notebook.ipynb"

pytestmark = [pytest.mark.worker, pytest.mark.slow]  # a kernel and a worker process


def output_of(nb, code: str) -> str:
    """What the one code cell holding `code` printed and showed as text."""
    [cell] = [cell for cell in nb.cells if cell.cell_type == "code" and code in cell.source]
    return "".join(out.get("text", "") + out.get("data", {}).get("text/plain", "") for out in cell.outputs)


def test_the_example_notebook_runs_and_changes_the_lr_live(tmp_path, idx_data, monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    [at] = [k for k, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", [])]
    runs_dir = tmp_path / "runs"
    config = {**TINY, "dataset": "mnist", "drawn_share": 0.0, "epochs": 1000}
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(
        f"runs_dir, data_dir = {str(runs_dir)!r}, {str(idx_data)!r}\nconfig = {config!r}\n"
        "look_at_step, new_lr = 3, 0.001"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel runs in tmp_path: brnn_core from this checkout
    with worker_environ(monkeypatch):
        try:
            NotebookClient(nb, timeout=240, kernel_name="python3",
                           resources={"metadata": {"path": str(tmp_path)}}).execute()
        finally:
            kill_workers(runs_dir)

    [run] = list_runs(runs_dir)
    status = run.status()
    assert status["state"] == "finished", status
    changes = [e for e in run.events() if e["kind"] == "set"]
    assert [(e["field"], e["old"], e["new"], e["source"]) for e in changes] == [
        ("lr", 0.01, 0.001, "user"), ("epochs", 1000, status["epoch"], "user")]
    paused_at = changes[0]["step"]
    train = run.metrics().query("split == 'train'")
    assert (train[train["step"] <= paused_at]["lr"] == 0.01).all()
    assert len(train[train["step"] > paused_at]) and (train[train["step"] > paused_at]["lr"] == 0.001).all()

    assert f"paused at step {paused_at}" in output_of(nb, "run.pause()")
    assert f"lr 0.01 -> 0.001 at step {paused_at}" in output_of(nb, "run.set(lr=new_lr")
    assert output_of(nb, "run.set(lr=-1)").startswith(f"not sent to run {run.id}: lr=-1: -1.0 is out of range")
    figures = [out for cell in nb.cells for out in cell.get("outputs", [])
               if "application/vnd.plotly.v1+json" in out.get("data", {})]
    assert len(figures) == 2
    x = figures[-1]["data"]["application/vnd.plotly.v1+json"]["data"][0]["x"]  # the final chart's raw loss
    if isinstance(x, dict):  # plotly's typed array: base64 of the raw values
        x = np.frombuffer(base64.b64decode(x["bdata"]), x["dtype"]).tolist()
    assert x == list(train["step"])
