"""Teach it on the Predict page: one click fine-tunes the picked checkpoint on the saved drawings.

The click builds the fine-tune with `training.teach.teach_config` (the measured defaults), starts it as
an ordinary run through the shared job registry, and remembers it in the session. A fragment shows its
progress; when it finishes, the new best.pt becomes the picked checkpoint and the held-out drawings'
and the validation accuracy are shown before -> after (from the run's report).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from brnn_core.checkpoint import CheckpointError
from brnn_core.config import TEACH_DEFAULTS, ConfigError
from brnn_core.runs.progress import progress_text
from brnn_core.runs.rundir import Run, RunError
from brnn_core.states import ACTIVE_STATES, State
from brnn_core.training.reports import read_report
from brnn_core.training.teach import MIN_TO_TEACH, TeachError, teach_config
from ui.common import flash, registry

REFRESH_S = 2.0


def _start(checkpoint: str, runs_dir: Path, data_dir: Path) -> None:
    try:
        cfg = teach_config(checkpoint, data_dir)
        run = registry().start(runs_dir, cfg, data_dir=data_dir)
    except (TeachError, CheckpointError, ConfigError, RunError, OSError) as exc:
        flash("error", f"Teach it did not start: {exc}")
        return
    st.session_state["teaching"] = {"run": str(run.path), "from": checkpoint}
    flash("info", f"Teaching {Path(checkpoint).parent.parent.name}'s checkpoint your drawings (run {run.id})…")


def _before_after(entry: dict | None, what: str) -> str:
    if not entry or entry.get("after") is None:
        return ""
    before = "?" if entry.get("before") is None else f"{100 * entry['before']:.1f}%"
    return f"{what}: {before} → {100 * entry['after']:.1f}%"


@st.fragment(run_every=REFRESH_S)
def _progress() -> None:
    teaching = st.session_state.get("teaching")
    if not teaching:
        return
    run = Run(Path(teaching["run"]))
    status = run.status()
    state = status.get("state")
    if state in ACTIVE_STATES:
        total = status.get("total_steps") or 0
        st.progress(min((status.get("step") or 0) / total, 1.0) if total else 0.0,
                    text=f"Teaching: {progress_text(status) or status.get('message') or 'starting…'}")
        return
    st.session_state.pop("teaching")
    if state != State.FINISHED:
        flash("error", f"Teach it ended {state}: {status.get('message')}")
    else:
        report = read_report(run) or {}
        said = [s for s in (_before_after(report.get("my_drawings"), "held-out drawings"),
                            _before_after(report.get("validation"), f"{run.config().get('dataset')} validation"))
                if s]
        st.session_state["predict_checkpoint"] = str(run.best_ckpt)  # picked on the rerun below
        flash("success", f"Taught: now using {run.id}'s best.pt. " + "; ".join(said))
    st.rerun()


def teach_panel(checkpoint: str, drawings: int, runs_dir: Path, data_dir: Path) -> None:
    """The Teach it button (once there are enough drawings for these classes) and the fine-tune's progress."""
    if st.session_state.get("teaching"):
        _progress()
        return
    ready = drawings >= MIN_TO_TEACH
    st.button("Teach it", type="primary", disabled=not ready, on_click=_start, args=(checkpoint, runs_dir, data_dir),
              icon=":material/school:",
              help=f"Fine-tune this checkpoint on your saved drawings mixed with its dataset "
                   f"({TEACH_DEFAULTS['epochs']} epochs, drawings {100 * TEACH_DEFAULTS['my_drawings']:g}% of each, "
                   f"peak lr {TEACH_DEFAULTS['lr']:g}); the new checkpoint is picked when it ends. Same as "
                   f"`python -m brnn_core teach CHECKPOINT`.")
    if not ready:
        st.caption(f"Save {MIN_TO_TEACH - drawings} more drawing(s) of these classes to teach it "
                   f"({drawings} of {MIN_TO_TEACH}).")
