"""Predict page: draw a digit, see the 28x28 image the model sees, its class probabilities, how the
network reads it row by row and which pixels decided; save drawings with their labels (my-drawings)."""

from __future__ import annotations

from ui.navigation import ensure_navigation

ensure_navigation()  # first, before PyTorch loads: see ui/navigation.py

from pathlib import Path

import numpy as np
import streamlit as st
from streamlit_drawable_canvas import st_canvas

from brnn_core import charts
from brnn_core.checkpoint import CheckpointError
from brnn_core.data.drawings import (
    MIN_FOR_ACCURACY,
    DrawingError,
    delete_drawing,
    drawings_dir,
    folder_signature,
    held_out_ordinals,
    save_drawing,
)
from brnn_core.inference.predictor import Predictor
from brnn_core.inference.uploads import UPLOADS_FOLDER, UploadError, save_upload
from brnn_core.model import network_name
from brnn_core.text import plural
from ui import drawings as my
from ui.common import flash, folders, picker_id, run_index, short_id, show_flashes
from ui.explaining import Explanations
from ui.inside import inside_panel
from ui.prediction import reading_section, show_directions, show_verdict
from ui.state import pick_checkpoint, picked_checkpoint
from ui.teach import teach_panel

MAX_UPLOAD_MB = 50
PICKER_CHECKPOINTS = 200  # the best ones (by validation accuracy); hundreds of sweep trials would bury them
runs_dir, data_dir = folders()
signature = folder_signature(data_dir)  # the drawings folder's fingerprint, taken once per page run
st.title("Draw a digit")
show_flashes()


@st.cache_resource(max_entries=8, show_spinner="Loading the checkpoint…")
def load_predictor(path: str, mtime: float) -> Predictor:
    """One Predictor per checkpoint file version (mtime in the key reloads a rewritten last.pt)."""
    return Predictor.from_checkpoint(path)


def checkpoint_labels() -> tuple[dict[str, str], dict[str, str]]:
    """(path -> short label, path -> full description with the drawings score) for every saved checkpoint, the
    runs' own choices by validation accuracy first (the default: RunIndex.checkpoint_choices). The short label fits
    the sidebar's picker; the description goes under it.
    Paths are the select box's values, so a choice survives its label changing (a score appearing)."""
    choices = run_index(runs_dir).checkpoint_choices()[:PICKER_CHECKPOINTS]
    scores = my.scores([c.path for c in choices], data_dir, signature)  # stored scores only: nothing evaluated

    def label(c) -> str:
        acc = f" · {100 * c.val_acc:.1f}%" if c.val_acc is not None else ""
        return f"{picker_id(c.run_id)} · {c.kind}{acc}"  # the drawings score: in the description under it

    def description(c) -> str:
        acc = f" · val acc {100 * c.val_acc:.1f}%" if c.val_acc is not None else ""
        return f"{short_id(c.run_id)} · {c.kind}.pt{acc}{my.score_label(scores[c.path])}"

    return {str(c.path): label(c) for c in choices}, {str(c.path): description(c) for c in choices}


def upload_checkpoint(side) -> tuple[str, str] | None:
    """(stored path, the user's file name) of a checkpoint file uploaded in the sidebar, None without one."""
    upload = side.file_uploader("Or use a checkpoint file of your own (.pt / .ckpt)", type=["pt", "ckpt", "pth"],
                                help="A checkpoint from this dashboard, or a bare state_dict like the blog's "
                                     "model.ckpt. While one is uploaded it is used instead of the run checkpoint "
                                     "above; remove it (×) to go back.")
    if upload is None:
        return None
    try:  # stored by content hash under runs/.uploads: the browser's file name is never a path
        return str(save_upload(runs_dir, upload.getvalue(), upload.name, max_bytes=MAX_UPLOAD_MB * 2**20)), upload.name
    except (UploadError, OSError) as exc:
        side.error(f"Upload refused: {exc}")
        return None


def run_checkpoint_picker(side, choices: dict[str, str], described: dict[str, str], *,
                          disabled: bool) -> str | None:
    """The run checkpoint picker. It shows the picked checkpoint (ui.state), which buttons elsewhere set
    ("Open best in Predict", Teach it), and a choice made here becomes the picked one."""
    if not choices:
        side.caption("No run checkpoint yet: train a model on the **Train** page.")
        return None
    options = list(choices)
    wanted = picked_checkpoint()
    if wanted and wanted not in choices and Path(wanted).is_file() and not wanted.startswith(uploads_root):
        options.insert(0, wanted)  # e.g. a checkpoint newer than the listing, or past its first PICKER_CHECKPOINTS
    if wanted not in options:
        wanted = options[0]
    st.session_state["ckpt_choice"] = wanted  # set before the widget: the picker shows what was picked
    path = side.selectbox("Run checkpoint", options, key="ckpt_choice", disabled=disabled,
                          format_func=lambda p: choices.get(p) or f"{Path(p).parent.parent.name} · {Path(p).stem}",
                          on_change=lambda: pick_checkpoint(st.session_state["ckpt_choice"]),
                          help=f"With {MIN_FOR_ACCURACY} or more saved drawings, the picked checkpoint's accuracy "
                               "on them is shown under it (on the held-out ones for a checkpoint taught them).")
    side.caption(described.get(path) or path)
    pick_checkpoint(path)
    return path


uploads_root = str((runs_dir / UPLOADS_FOLDER).resolve())
side = st.sidebar
side.subheader("Checkpoint")
uploaded = None
choices, described = checkpoint_labels()
picker = side.container()
uploaded = upload_checkpoint(side)
path = run_checkpoint_picker(picker, choices, described, disabled=uploaded is not None)
shown_name = None
if uploaded is not None:
    path, shown_name = uploaded
    picker.caption(f"Using your file **{shown_name}**, not the run checkpoint: remove it below (×) to go back.")
if path is None:
    st.info("No checkpoint yet. Train a model on the **Train** page, or upload a checkpoint in the sidebar.")
    st.stop()

try:
    predictor = load_predictor(path, Path(path).stat().st_mtime)
except CheckpointError as exc:
    message = str(exc).replace(path, shown_name) if shown_name else str(exc)
    st.error(f"This checkpoint cannot be used: {message}", icon=":material/error:")
    st.stop()
cfg = predictor.checkpoint.model_config
bare = " (bare state_dict, shapes inferred)" if predictor.checkpoint.bare else ""
side.caption(f"{network_name(cfg)}, hidden {cfg.hidden_size}, {plural(cfg.num_layers, 'layer')}, head {cfg.head}, "
             f"{cfg.num_classes} classes{bare}")


def on_save(canvas: np.ndarray, label: int, classes: list[str]) -> None:
    n = st.session_state["canvas_n"]
    try:
        saved = save_drawing(data_dir, canvas, label, classes)
    except (DrawingError, OSError) as exc:
        st.session_state["save_note"] = (n, "error", f"Not saved: {exc}")
        return
    st.session_state["canvas_n"] = n + 1  # a fresh canvas for the next drawing
    held = " (held out: never trained on, so Teach it can show before → after on it)" if saved.held_out else ""
    st.session_state["save_note"] = (n + 1, "success", f"Saved as {saved.class_name}{held}.")
    st.session_state["drawings_changed"] = True  # the listing below the fragment is redrawn (draw_and_predict)


def show_save_note(canvas_n: int, drawing: bool) -> None:
    """'Saved as 7.' under the save buttons, only until the next stroke: it is about the drawing just saved."""
    note = st.session_state.get("save_note")
    if note and (note[0] != canvas_n or (drawing and note[1] == "success")):
        st.session_state.pop("save_note")
    elif note:
        getattr(st, note[1])(note[2])


def on_delete(drawing_id: str) -> None:
    try:
        delete_drawing(data_dir, drawing_id)
    except (DrawingError, OSError) as exc:
        flash("error", f"Not deleted: {exc}")


@st.fragment
def draw_and_predict(predictor: Predictor, checkpoint: str) -> None:
    """The canvas, its prediction, the look inside and the save buttons. A stroke reruns only this fragment:
    the checkpoint listing above (every run's files) and the saved drawings below are not read again. The run
    computes the model input and the prediction only; the explanations are worked out in the background
    (ui/explaining.py), so the next stroke's run never waits behind them."""
    left, right = st.columns([1, 1], gap="large")
    with left:
        stroke = st.slider("Stroke width", 5, 40, 20, help="About 20 px on this 280 px canvas matches MNIST's pen.")
        st.session_state.setdefault("canvas_n", 0)
        if st.button("Clear"):
            st.session_state["canvas_n"] += 1
        result = st_canvas(stroke_width=stroke, stroke_color="#FFFFFF", background_color="#000000", height=280,
                           width=280, drawing_mode="freedraw", return_image_data=True,
                           key=f"canvas_{st.session_state['canvas_n']}")
        st.caption("Draw one digit, large and centred, white on black. Each stroke updates the prediction.")

    with right:
        image = result.image_data if result is not None else None  # decoded from the browser's PNG on each access
        try:
            x = predictor.model_input(np.asarray(image)) if image is not None else None
        except ValueError as exc:  # a canvas of an impossible size (a tampered session): say so, draw nothing
            st.error(f"This drawing cannot be classified: {exc}")
            x = None
        if x is None:
            st.info("Draw a digit on the canvas to see what the model predicts.")
        else:
            assessment = predictor.assess(x.numpy())
            top = assessment.top
            seen_col, verdict_col = st.columns([1, 1])
            seen_col.image(np.kron(x.numpy(), np.ones((6, 6))), caption="What the model sees (28×28)", clamp=True)
            show_verdict(verdict_col, predictor, assessment, predictor.classes)
            st.plotly_chart(charts.probabilities_figure(assessment.probs, predictor.classes), key="probs",
                            on_select="ignore")

    # The explanations in one container, there in every run: what they add at this level changes from run to run
    # (the poll below while they are worked out, nothing once they are drawn), and the save buttons after them must
    # keep their place. Streamlit keeps the previous run's elements until a run ends, so a row of buttons that moved
    # showed twice until the rest of the page was drawn.
    with st.container():
        if x is not None:
            explain = Explanations(checkpoint, x.numpy())
            reading_section(predictor, x.numpy(), top, explain)
            show_directions(predictor, x.numpy(), top, explain)
            inside_panel(predictor, x.numpy(), top, checkpoint, data_dir, explain)
            explain.wait()

    st.subheader("Teach it your handwriting")
    if x is not None:
        st.markdown("**Save this drawing as:**")
        buttons = st.columns(min(len(predictor.classes), 10))
        for i, name in enumerate(predictor.classes):
            buttons[i % len(buttons)].button(name, key=f"save_{i}", on_click=on_save,
                                             args=(np.asarray(image), i, predictor.classes),
                                             help=f"Save this drawing labelled {name}", width="stretch")
    show_save_note(st.session_state["canvas_n"], x is not None)
    if st.session_state.pop("drawings_changed", False):
        st.rerun()  # a drawing was saved: the whole page, so the listing and the message show it


draw_and_predict(predictor, path)

MAX_SHOWN = 64
listing = my.drawings(data_dir, signature)
for warning in listing.warnings:
    st.warning(f"My drawings: {warning}")
mine = [(d, img) for d, img in zip(listing.drawings, listing.images, strict=True)
        if list(d.classes) == predictor.classes]
held = sum(d.held_out for d, _ in mine)
st.caption(f"{plural(len(mine), 'saved drawing')} for these classes ({held} held out for "
           f"validation) in {drawings_dir(data_dir)}; of each class the {held_out_ordinals()}, ... are held out. "
           f"With {MIN_FOR_ACCURACY} or more, the checkpoint picker scores each checkpoint on them; on the Train "
           "page, *My drawings share* mixes them into training."
           if mine else "No saved drawings yet: draw a digit, then click its true label to save it.")
teach_panel(path, len(mine), held, runs_dir, data_dir)
shown = list(reversed(mine[-MAX_SHOWN:]))
for start in range(0, len(shown), 8):  # a row of columns per 8 drawings: each row starts in line
    for column, (d, img) in zip(st.columns(8), shown[start:start + 8], strict=False):
        with column:  # the label as a caption of the column's width: under a 56 px image "7 · held out" wrapped
            st.image(img, width=56)
            st.caption(f"{d.class_name}{' · held out' if d.held_out else ''}")
            st.button("Delete", key=f"del_{d.id}", on_click=on_delete, args=(d.id,), icon=":material/delete:",
                      help=f"Delete this {d.class_name}")
