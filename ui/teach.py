"""Teach it on the Predict page: one click fine-tunes the picked checkpoint on the saved drawings.

The click starts `training.teach.teach_config`'s fine-tune as an ordinary run through the shared job
registry. A fragment shows its progress beside the button; when it finishes, its best.pt becomes the
picked checkpoint and the result (held-out drawings and validation accuracy before -> after, from the
run's report) stays beside the button.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from brnn_core.checkpoint import CheckpointError
from brnn_core.config import TEACH_DEFAULTS, ConfigError
from brnn_core.data.drawings import held_out_ordinals
from brnn_core.runs.progress import progress_text
from brnn_core.runs.rundir import Run, RunError
from brnn_core.states import ACTIVE_STATES, State
from brnn_core.text import plural
from brnn_core.training.reports import read_report
from brnn_core.training.teach import MIN_TO_TEACH, TeachError, teach_config
from ui.common import registry
from ui.state import pick_checkpoint

REFRESH_S = 2.0
_RESULT = "teach_result"  # (kind, message, the taught checkpoint or None) of the last Teach it, beside the button


def _start(checkpoint: str, runs_dir: Path, data_dir: Path) -> None:
    try:
        cfg = teach_config(checkpoint, data_dir)
        run = registry().start(runs_dir, cfg, data_dir=data_dir)
    except (TeachError, CheckpointError, ConfigError, RunError, OSError) as exc:
        st.session_state[_RESULT] = ("error", f"Teach it did not start: {exc}", None)
        return
    st.session_state.pop(_RESULT, None)
    st.session_state["teaching"] = {"run": str(run.path), "from": checkpoint}


def _before_after(entry: dict | None, what: str) -> str:
    if not entry or entry.get("after") is None:
        return ""
    before = "?" if entry.get("before") is None else f"{100 * entry['before']:.1f}%"
    return f"{what}: {before} → {100 * entry['after']:.1f}%"


def _worst_class(entry: dict | None, classes: list[str]) -> str:
    """The class whose validation accuracy fell most (did it forget one?), or that none fell; '' without them."""
    before, after = (entry or {}).get("per_class_before"), (entry or {}).get("per_class_after")
    if not before or not after or len(before) != len(after):
        return ""
    drops = [(b - a, k) for k, (b, a) in enumerate(zip(before, after, strict=True)) if b == b and a == a]  # no NaN
    if not drops:
        return ""
    drop, k = max(drops)
    name = classes[k] if k < len(classes) else str(k)
    if drop <= 0.005:
        return "no class lost more than half a point of validation accuracy"
    return f"most forgotten class: {name}, {100 * before[k]:.1f}% → {100 * after[k]:.1f}%"


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
                    text=f"Teaching {Path(teaching['from']).parent.parent.name}'s checkpoint your drawings: "
                         f"{progress_text(status) or status.get('message') or 'starting…'}")
        return
    st.session_state.pop("teaching")
    st.session_state[_RESULT] = _result(run, state, status)
    if state == State.FINISHED:
        pick_checkpoint(run.best_ckpt)  # the sidebar's picker shows it on the rerun below
    st.rerun()


def _result(run: Run, state: str | None, status: dict) -> tuple[str, str, str | None]:
    if state != State.FINISHED:
        return "error", f"Teach it ended {state}: {status.get('message')}", None
    report = read_report(run) or {}
    drawings = report.get("my_drawings") or {}
    held = _before_after(drawings, f"your {drawings.get('held_out', '?')} held-out drawings")
    if not held:
        held = ("no held-out drawing to show before → after on (the "
                f"{held_out_ordinals()} drawing of each class is kept out of training for that)")
    said = [held, _before_after(report.get("validation"), f"{run.config().get('dataset')} validation"),
            _worst_class(report.get("validation"), report.get("classes") or [])]
    return ("success", f"Taught: now predicting with {run.id}'s best.pt. " + "; ".join(s for s in said if s) + ".",
            str(run.best_ckpt.resolve()))


def teach_panel(checkpoint: str, drawings: int, held_out: int, runs_dir: Path, data_dir: Path) -> None:
    """The Teach it button (once there are enough drawings for these classes), what it will be able to show,
    the fine-tune's progress and its result, together."""
    if st.session_state.get("teaching"):
        _progress()
        return
    result = st.session_state.get(_RESULT)
    if result and result[2] and result[2] != str(Path(checkpoint).resolve()):
        st.session_state.pop(_RESULT)  # another checkpoint was picked since: "now predicting with" is no longer so
        result = None
    if result:
        getattr(st, result[0])(result[1])
    ready = drawings >= MIN_TO_TEACH
    st.button("Teach it", type="primary", disabled=not ready, on_click=_start, args=(checkpoint, runs_dir, data_dir),
              icon=":material/school:",
              help=f"Fine-tune this checkpoint on your saved drawings mixed with its dataset "
                   f"({TEACH_DEFAULTS['epochs']} epochs, drawings {100 * TEACH_DEFAULTS['my_drawings']:g}% of each, "
                   f"peak lr {TEACH_DEFAULTS['lr']:g}); the new checkpoint is picked when it ends. Same as "
                   f"`python -m brnn_core teach CHECKPOINT`.")
    if not ready:
        st.caption(f"Save {plural(MIN_TO_TEACH - drawings, 'more drawing')} of these classes to teach it "
                   f"({drawings} of {MIN_TO_TEACH}).")
    st.caption(_evidence(drawings, held_out))


def _evidence(drawings: int, held_out: int) -> str:
    """What Teach it will be able to show before -> after, said before the click."""
    rule = f"the {held_out_ordinals()} drawing of each class is held out: never trained on"
    if not held_out:
        return (f"Before → after on your drawings needs a held-out one ({rule}). None yet: save a "
                f"{held_out_ordinals(1)} drawing of any class. Without one, Teach it shows the validation accuracy "
                "only.")
    return (f"Teach it trains on {drawings - held_out} of your drawings and shows before → after on the "
            f"{held_out} held out ({rule}).")
