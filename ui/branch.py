"""The "Branch from here" form, shared by the Runs and Train pages (the logic is brnn_core.runs.branch)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from brnn_core.config import OPTIMIZERS
from brnn_core.runs.branch import BRANCH_CHECKPOINTS, branch_defaults
from brnn_core.runs.notes import read_notes
from brnn_core.runs.retention import pruned_reason
from brnn_core.runs.rundir import Run
from brnn_core.states import ACTIVE_STATES
from ui.common import flash, registry, select_run


@st.cache_data(max_entries=16, show_spinner=False)
def _defaults(run_path: str, kind: str, mtime_ns: int) -> dict:
    return branch_defaults(Run(Path(run_path)), kind)  # mtime_ns: a rewritten checkpoint is read again


def _on_branch(runs_dir: Path, data_dir: Path, parent_id: str, kind: str, prefix: str, step: int,
               tags_key: str) -> None:
    state = st.session_state
    overrides = {name: state[f"{prefix}_{name}"] for name in ("lr", "grad_clip", "epochs", "optimizer")}
    try:
        new = registry().branch(runs_dir, parent_id, kind, overrides, data_dir=data_dir,
                                keep_tags=bool(state.get(tags_key)))
    except (ValueError, OSError) as exc:  # BranchError, ConfigError, CheckpointError: the message says why
        flash("error", f"Not branched: {exc}")
        return
    select_run(new.id)
    state["inspect"] = new.id  # the Runs page inspects the new branch
    flash("success", f"Started branch {new.id} from {parent_id}'s {kind}.pt (step {step}).")


def branch_form(run: Run, runs_dir: Path, data_dir: Path, *, key: str) -> None:
    """Pick a checkpoint and new lr / clip / epochs / optimizer; the button creates the branch and starts it."""
    with st.expander("Branch from here", icon=":material/call_split:"):
        found = _readable_checkpoints(run)
        stored = run.stored_status()
        pruned = pruned_reason(run, tuple(k for k in BRANCH_CHECKPOINTS if k not in found), stored)
        if pruned:
            left = " or ".join(f"{k}.pt" for k in found)
            st.caption(f"{pruned}: " + (f"branch from {left}." if found else
                                        "nothing is left to branch from (its records are kept)."))
        if not found:
            if not pruned:
                st.caption("No checkpoint saved yet: nothing to branch from.")
            return
        st.caption("A new run that starts from this run's weights (and optimizer state, from last.pt) and "
                   "continues its steps. The architecture and data split stay; epochs counts this run's too.")
        kind_key = f"{key}_{run.id}_kind"
        if st.session_state.get(kind_key) not in found:  # e.g. its last.pt pruned since: the first one left
            st.session_state.pop(kind_key, None)
        # the labels stay the same while a checkpoint is rewritten (the browser answers with the label it
        # showed: one that changed matches no option, and neither would be ticked); its epoch and step go below
        kind = st.radio("Checkpoint", list(found), key=kind_key, horizontal=True, format_func=lambda k: f"{k}.pt",
                        captions=[f"epoch {found[k]['epoch']}, step {found[k]['step']}" for k in found])
        d = found[kind]
        prefix = f"{key}_{run.id}_{kind}"  # per checkpoint: its own starting values
        lr, clip, epochs, optimizer = st.columns([1.4, 1.1, 1.1, 1.2])  # as the live controls: an lr fits whole
        lr.number_input("Learning rate", value=d["lr"], min_value=0.0, format="%.5f", step=0.001, key=f"{prefix}_lr")
        clip.number_input("Gradient clipping", value=d["grad_clip"], min_value=0.0, step=0.5,
                          key=f"{prefix}_grad_clip")
        epochs.number_input("Total epochs", value=d["epochs"], min_value=d["min_epochs"], step=1,
                            key=f"{prefix}_epochs",
                            help=f"Counting this run's: the checkpoint is at epoch {d['epoch']}.")
        optimizer.selectbox("Optimizer", OPTIMIZERS, index=OPTIMIZERS.index(d["optimizer"]),
                            key=f"{prefix}_optimizer",
                     help="Another optimizer starts with a fresh state.")
        if kind == "best":
            st.caption("best.pt keeps only the weights: the branch starts with a fresh optimizer state.")
        try:
            tags = read_notes(run.path).tags
        except OSError:  # an unreadable notes.json: no tags to keep (the runs table says why)
            tags = ()
        tags_key = f"{key}_{run.id}_keep_tags"
        st.checkbox(f"Keep the parent's tags ({', '.join(tags)})" if tags else "Keep the parent's tags (it has none)",
                    key=tags_key, value=False, disabled=not tags,
                    help="Off: the branch starts untagged (a tag often says what this run was, e.g. baseline).")
        busy = run.status().get("state") in ACTIVE_STATES
        if busy:
            st.caption("Stop this run (or wait for it to end) before branching from it.")
        st.button("Branch from here", key=f"{key}_{run.id}_go", type="primary", disabled=busy,
                  on_click=_on_branch, args=(runs_dir, data_dir, run.id, kind, prefix, d["step"], tags_key))


def _readable_checkpoints(run: Run) -> dict[str, dict]:
    """kind -> the form's starting values, for each of the run's checkpoints that loads; a bad one is named."""
    found = {}
    for kind in BRANCH_CHECKPOINTS:
        path = run.last_ckpt if kind == "last" else run.best_ckpt
        try:
            found[kind] = _defaults(str(run.path), kind, path.stat().st_mtime_ns)
        except (FileNotFoundError, NotADirectoryError):  # none (or a file in checkpoints/'s place)
            continue
        except OSError as exc:
            st.caption(f"{kind}.pt cannot be read: {exc.strerror or exc}")
        except ValueError as exc:  # CheckpointError: a damaged or foreign file
            st.caption(f"{kind}.pt cannot be branched from: {exc}")
    return found
