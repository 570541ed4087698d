"""The Runs page's interop parts: a run's environment.json, two runs' settings side by side, and the model
exported as an ONNX or TorchScript file to download (brnn_core.environment, runs.compare, inference.export)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from brnn_core.checkpoint import CheckpointError
from brnn_core.environment import FILE as ENVIRONMENT_FILE
from brnn_core.fileio import read_json
from brnn_core.inference.export import FORMATS, ExportError, ExportMismatch, check_digits, export_model
from brnn_core.runs.compare import side_by_side
from brnn_core.runs.rundir import Run


def environment(run: Run) -> None:
    """What the run ran on: code, versions, machine, command line; every package in a table."""
    record = read_json(run.path / ENVIRONMENT_FILE)
    if not isinstance(record, dict):
        st.info("No environment record: this run started before runs wrote environment.json.")
        return
    git = record.get("git")
    code = ("installed package (no git checkout)" if not isinstance(git, dict) else
            f"commit `{git.get('commit', '?')[:12]}`" + (f", with changes (diff {str(git.get('diff_sha256'))[:12]}, "
                                                          f"{git.get('untracked', 0)} untracked files)"
                                                          if git.get("dirty") else ", clean"))
    cpu = record.get("cpu") or {}
    flags = ", ".join(name for name, on in (cpu.get("flags") or {}).items() if on) or "unknown"
    gpus = "; ".join(f"{g.get('name')} ({g.get('memory_gb')} GB)" for g in record.get("gpus") or []) or "none"
    st.markdown("\n".join([
        f"- **Code**: brnn_core {record.get('brnn_core')}, {code}",
        f"- **Python** {record.get('python')}, **torch** {record.get('torch')}, **torchvision** "
        f"{record.get('torchvision')}, **CUDA** {record.get('cuda') or 'none'}, "
        f"**cuDNN** {record.get('cudnn') or 'none'}",
        f"- **CPU**: {cpu.get('model')} ({cpu.get('logical_cpus')} logical), flags: {flags}",
        f"- **GPUs**: {gpus}; trained on `{record.get('device')}`",
        f"- **Host** `{record.get('host')}`, platform {record.get('platform')}"]))
    st.code(" ".join(record.get("command") or []), language="bash")
    if record.get("env"):
        st.dataframe(pd.DataFrame(list(record["env"].items()), columns=["variable", "value"]), hide_index=True,
                     key="environment_env")
    packages = record.get("packages") or {}
    with st.expander(f"{len(packages)} installed packages"):
        st.dataframe(pd.DataFrame(list(packages.items()), columns=["package", "version"]), hide_index=True,
                     key="environment_packages")


def compare_two(runs_dir: Path, run_ids: list[str]) -> None:
    """For exactly two selected runs: their config and environment side by side, the differences first."""
    if len(run_ids) != 2:
        return
    a, b = (Run(Path(runs_dir) / rid) for rid in run_ids)
    table = side_by_side(a, b)
    differ = int(table["differs"].sum())
    with st.expander(f"Compare {a.id} and {b.id}: {differ} settings differ", icon=":material/compare_arrows:"):
        only = st.toggle("Only what differs", value=True, key="compare_only_differences")
        st.dataframe(table[table["differs"]] if only else table, hide_index=True, key="compare_table",
                     column_config={"differs": None})


@st.cache_resource(show_spinner="Loading the test digits the export is checked on…")
def _digits():
    return check_digits()  # read-only: every export runs on the same tensor


def export_download(run: Run) -> None:
    """Export best.pt (or last.pt) as ONNX or TorchScript, checked in its runtime, then offer the file."""
    ckpt = run.best_ckpt if run.best_ckpt.is_file() else run.last_ckpt
    if not ckpt.is_file():
        return
    cols = st.columns([1, 1, 2])
    fmt = cols[0].selectbox("Export the model as", list(FORMATS), key=f"export_format_{run.id}",
                            help="(N, 28, 28) images in [0, 1] in, class probabilities out, batch size free. ONNX "
                                 "runs in ONNX Runtime without PyTorch (docs/cli.md); the same as "
                                 "`python -m brnn_core export`.")
    slot = f"exported_{run.id}_{fmt}"
    version = (ckpt.name, ckpt.stat().st_mtime_ns)
    if cols[1].button(f"Export {ckpt.name}", key=f"export_{run.id}"):
        with tempfile.TemporaryDirectory() as tmp, st.spinner(f"Exporting and checking the {fmt} file…"):
            out = Path(tmp) / f"{run.id}{FORMATS[fmt]}"
            try:
                done = export_model(ckpt, fmt, out, digits=_digits())
            except (ExportError, ExportMismatch, CheckpointError) as exc:
                st.error(f"Not exported: {exc}", icon=":material/error:")
                return
            st.session_state[slot] = (version, out.read_bytes(), done.checked, done.max_difference)
    kept = st.session_state.get(slot)
    if kept and kept[0] == version:
        _, blob, checked, difference = kept
        cols[2].download_button(f"Download {run.id}{FORMATS[fmt]}", blob, file_name=f"{run.id}{FORMATS[fmt]}",
                                mime="application/octet-stream", on_click="ignore", key=f"export_download_{run.id}",
                                help=f"Checked on {checked} test digits: probabilities within {difference:.1g} of "
                                     "the checkpoint's.")
