"""The dashboard's shared session state, one owner each: the Train form (with its Seeds) and the picked checkpoint.

Every page reads and writes these through the functions here, never through raw session-state keys, so a
page opened first (Sweep, Predict) finds them complete, and a button on one page that sets them is what the
other page shows. The selected run lives in ui/common (it is kept in the URL).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import streamlit as st

from brnn_core.config import TrainConfig
from brnn_core.data.datasets import default_dataset
from brnn_core.runs.seeds import SeedsError, parse_seeds

_FORM = "form"  # field -> value, the Train page's form as last drawn
_CHECKPOINT = "picked_checkpoint"  # the resolved path of the checkpoint the Predict page predicts with
_FILLED_FROM = "form_filled_from"  # where the Train form's settings came from (a sweep's best trial), until a start
SEEDS_KEY = "w_seeds"  # the Seeds field's text ("0,1,2": one run each); its first seed is the form's `seed`


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


def fill_train_form(values: dict, data_dir: Path, source: str | None = None) -> dict:
    """Put `values` (e.g. a sweep's best settings) into the Train form; its widgets start from them next time.
    `source` says where they came from ("sweep X's best trial"): the Train page says so above the form."""
    if source:
        st.session_state[_FILLED_FROM] = source
    form = train_form(data_dir)
    known = {k: v for k, v in values.items() if k in form}
    form.update(known)
    for name in known:
        st.session_state.pop(form_key(name), None)
    if "seed" in known:  # the Seeds field starts again from the one seed given
        st.session_state.pop(SEEDS_KEY, None)
    return form


def filled_from(*, forget: bool = False) -> str | None:
    """Where the Train form's settings came from, if another page filled it; `forget`: and no longer (a start)."""
    return st.session_state.pop(_FILLED_FROM, None) if forget else st.session_state.get(_FILLED_FROM)


def seeds_text() -> str:
    """What the Seeds field holds: what was typed, else the form's one seed. (It reads the stored form without
    rebuilding it: the Train page's form dict stays the one its widgets write to.)"""
    if SEEDS_KEY not in st.session_state:
        st.session_state[SEEDS_KEY] = str((st.session_state.get(_FORM) or {}).get("seed", TrainConfig().seed))
    return st.session_state[SEEDS_KEY]


def form_seeds() -> list[int]:
    """The seeds to start, one run each; SeedsError says what is wrong with the typed text."""
    return parse_seeds(seeds_text())


def form_now(data_dir: Path) -> dict:
    """The form as its widgets hold it now (callbacks run before the script body redraws the form); `seed` is
    the Seeds field's first seed."""
    state = st.session_state
    now = {name: state.get(form_key(name), value) for name, value in train_form(data_dir).items()}
    with contextlib.suppress(SeedsError):  # the field shows what is wrong; the form keeps its last good seed
        now["seed"] = form_seeds()[0]
    return now


def pick_checkpoint(path: str | Path) -> None:
    """Make `path` the checkpoint the Predict page uses (its picker follows on the next run)."""
    st.session_state[_CHECKPOINT] = str(Path(path).resolve())


def picked_checkpoint() -> str | None:
    return st.session_state.get(_CHECKPOINT)
