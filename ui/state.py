"""The dashboard's shared session state, one owner each: the Train form and the picked checkpoint.

Every page reads and writes these through the functions here, never through raw session-state keys, so a
page opened first (Sweep, Predict) finds them complete, and a button on one page that sets them is what the
other page shows. The selected run lives in ui/common (it is kept in the URL).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from brnn_core.config import TrainConfig
from brnn_core.data.datasets import default_dataset

_FORM = "form"  # field -> value, the Train page's form as last drawn
_CHECKPOINT = "picked_checkpoint"  # the resolved path of the checkpoint the Predict page predicts with


def form_key(name: str) -> str:
    """The session-state key of the Train page's widget for one field."""
    return f"w_{name}"


def form_defaults(data_dir: Path) -> dict:
    """A fresh form: TrainConfig's defaults on the dataset this machine has."""
    return TrainConfig(dataset=default_dataset(data_dir)).to_dict()


def train_form(data_dir: Path) -> dict:
    """The Train form, always complete: the defaults, then what this session changed. Unknown keys (an old
    best-config.json's) are dropped, so every page can index any TrainConfig field."""
    stored = st.session_state.get(_FORM) or {}
    defaults = form_defaults(data_dir)
    form = defaults | {k: v for k, v in stored.items() if k in defaults}
    st.session_state[_FORM] = form
    return form


def fill_train_form(values: dict, data_dir: Path) -> dict:
    """Put `values` (e.g. a sweep's best settings) into the Train form; its widgets start from them next time."""
    form = train_form(data_dir)
    known = {k: v for k, v in values.items() if k in form}
    form.update(known)
    for name in known:
        st.session_state.pop(form_key(name), None)
    return form


def form_now(data_dir: Path) -> dict:
    """The form as its widgets hold it now (callbacks run before the script body redraws the form)."""
    state = st.session_state
    return {name: state.get(form_key(name), value) for name, value in train_form(data_dir).items()}


def pick_checkpoint(path: str | Path) -> None:
    """Make `path` the checkpoint the Predict page uses (its picker follows on the next run)."""
    st.session_state[_CHECKPOINT] = str(Path(path).resolve())


def picked_checkpoint() -> str | None:
    return st.session_state.get(_CHECKPOINT)
