"""Runs page, headless (AppTest): the inspected run's environment.json, two selected runs' config and environment
side by side (differences first), and its model exported as ONNX for download (ui/interop.py)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime
import pandas as pd
from helpers import copy_run, no_exception, open_page

from brnn_core.inference.export import INPUT_NAME, OUTPUT_NAME


def table_with(at, column: str) -> pd.DataFrame | None:
    """The page's table whose first column is `column` (a plain table has no key in AppTest), None if none."""
    return next((d.value for d in at.dataframe if list(d.value.columns)[:1] == [column]), None)


def test_the_environment_tab_shows_what_the_run_ran_on(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir, "20000102-000000-mnist-sample-bbbb")
    old = copy_run(finished, runs_dir, "20000101-000000-mnist-sample-aaaa")
    (old.path / "environment.json").unlink()  # a run from before environment.json
    record = json.loads((run.path / "environment.json").read_text())
    at = open_page("pages/runs.py", "Runs")
    shown = "\n".join(m.value for m in at.markdown)
    assert f"**torch** {record['torch']}" in shown and f"commit `{record['git']['commit'][:12]}`" in shown
    assert record["cpu"]["model"] in shown
    packages = table_with(at, "package")
    assert dict(zip(packages["package"], packages["version"], strict=True)) == record["packages"]
    at.selectbox(key="inspect").select(old.id).run()
    no_exception(at)
    assert any("No environment record" in i.value for i in at.info)


def test_two_selected_runs_side_by_side_differences_first(dirs, finished):
    runs_dir, _ = dirs
    a = copy_run(finished, runs_dir, "20000101-000000-mnist-sample-aaaa")
    b = copy_run(finished, runs_dir, "20000102-000000-mnist-sample-bbbb")
    config = b.config()
    config["train"]["lr"] = 0.5
    b.config_path.write_text(json.dumps(config))
    at = open_page("pages/runs.py", "Runs")
    assert table_with(at, "setting") is None  # one run selected: nothing to compare
    at.session_state["runs_table"] = {"selection": {"rows": [0, 1], "columns": []}}
    at.run()
    no_exception(at)
    assert any(e.label.startswith(f"Compare {b.id} and {a.id}: ") for e in at.expander)
    only = table_with(at, "setting")
    assert "config.train.lr" in set(only["setting"]) and "config.train.hidden_size" not in set(only["setting"])
    at.toggle(key="compare_only_differences").set_value(False).run()
    everything = table_with(at, "setting")
    assert len(everything) > len(only) and list(everything["setting"][:len(only)]) == list(only["setting"])


def test_the_files_tab_exports_the_model_for_download(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    at = open_page("pages/runs.py", "Runs")
    assert at.selectbox(key=f"export_format_{run.id}").value == "onnx"
    at.button(key=f"export_{run.id}").click().run(timeout=300)
    no_exception(at)
    assert not at.error
    _, blob, checked, difference = at.session_state[f"exported_{run.id}_onnx"]
    assert checked == 500 and difference <= 1e-4
    session = onnxruntime.InferenceSession(blob, providers=["CPUExecutionProvider"])  # the bytes offered
    probs = session.run([OUTPUT_NAME], {INPUT_NAME: np.zeros((3, 28, 28), "float32")})[0]
    assert probs.shape == (3, 10)
