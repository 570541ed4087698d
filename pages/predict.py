"""Predict page: draw a digit, see the 28x28 image the model sees and its class probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import streamlit as st
from streamlit_drawable_canvas import st_canvas

from brnn_core import charts
from brnn_core.checkpoint import CheckpointError
from brnn_core.inference import Predictor, prepare
from brnn_core.runs import checkpoint_choices
from brnn_core.uploads import UploadError, save_upload
from ui.common import folders, short_id
from ui.navigation import ensure_navigation

ensure_navigation()

MAX_UPLOAD_MB = 50
runs_dir, _ = folders()
st.title("Draw a digit")


@st.cache_resource(max_entries=8, show_spinner="Loading the checkpoint…")
def load_predictor(path: str, mtime: float) -> Predictor:
    """One Predictor per checkpoint file version (mtime in the key reloads a rewritten last.pt)."""
    return Predictor.from_checkpoint(path)


def checkpoint_labels() -> dict[str, str]:
    """label -> path for every saved checkpoint, best validation accuracy first (the default)."""
    def label(c) -> str:
        acc = f" · val acc {100 * c.val_acc:.1f}%" if c.val_acc is not None else ""
        return f"{short_id(c.run_id)} · {c.kind}{acc}"

    return {label(c): str(c.path) for c in checkpoint_choices(runs_dir)}


choices = checkpoint_labels()
side = st.sidebar
side.subheader("Checkpoint")
upload = side.file_uploader("…or upload a .pt / .ckpt file", type=["pt", "ckpt", "pth"],
                            help="A checkpoint from this dashboard, or a bare state_dict like the blog's model.ckpt.")
path = None
if upload is not None:
    try:  # stored by content hash under runs/.uploads: the browser's file name is never a path
        path = str(save_upload(runs_dir, upload.getvalue(), upload.name, max_bytes=MAX_UPLOAD_MB * 2**20))
        side.caption(f"Using the uploaded {upload.name}.")
    except (UploadError, OSError) as exc:
        side.error(f"Upload refused: {exc}")
if path is None:
    if not choices:
        st.info("No checkpoint yet. Train a model on the **Train** page (the defaults take about a minute on a "
                "CPU), or upload a checkpoint in the sidebar.")
        st.stop()
    wanted = st.session_state.pop("predict_checkpoint", None)  # "Open best in Predict" on the Sweep page
    if wanted in choices.values():
        st.session_state["ckpt_choice"] = next(label for label, p in choices.items() if p == wanted)
    label = side.selectbox("Run checkpoint", list(choices), key="ckpt_choice")
    path = choices[label]

try:
    predictor = load_predictor(path, Path(path).stat().st_mtime)
except CheckpointError as exc:
    st.error(f"This checkpoint cannot be used: {exc}")
    st.stop()
cfg = predictor.checkpoint.model_config
bare = " (bare state_dict, shapes inferred)" if predictor.checkpoint.bare else ""
side.caption(f"BiLSTM hidden {cfg.hidden_size}, {cfg.num_layers} layers, head {cfg.head}, "
             f"{cfg.num_classes} classes{bare}")

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
    image = result.image_data if result is not None else None
    x = prepare(np.asarray(image)) if image is not None else None
    if x is None:
        st.info("Draw a digit on the canvas to see what the model predicts.")
    else:
        probs = predictor.predict(x.numpy())
        top = int(np.argmax(probs))
        c1, c2 = st.columns([1, 1])
        c1.image(np.kron(x.numpy(), np.ones((6, 6))), caption="What the model sees (28×28)", clamp=True)
        c2.metric("Prediction", predictor.classes[top])
        c2.caption(f"{100 * probs[top]:.1f}% probability")
        st.plotly_chart(charts.probabilities_figure(probs, predictor.classes), key="probs", on_select="ignore")
