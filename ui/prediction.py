"""What the Predict page says about one prediction: the verdict with its calibrated probability and a notice
when the drawing does not look like what the model was trained on, how the model read it (the look-inside
section, with its caption in plain words), and what each direction drew on."""

from __future__ import annotations

import numpy as np
import streamlit as st

from brnn_core import charts, gradient_charts
from brnn_core.data.datasets import MNIST_CLASSES
from brnn_core.inference.predictor import Assessment, Predictor
from brnn_core.inference.saliency import UNIT
from brnn_core.model import network_name
from ui.explaining import Explanations, shown

READING_CAPTION = (
    "Left: the model reads your image one row of pixels at a time, {how}. "
    "Each row of the chart is what it would answer if the image ended at that row; the rows above your ink "
    "show its guess from an empty image. Right: which pixels pushed it towards its answer (red) or away from "
    "it (blue), measured from an all-black image (integrated gradients).")
GPU_NOTE = (
    " On the GPU, the right-hand chart is computed without NVIDIA's fast recurrent code (cuDNN), which cannot do "
    "this measurement on a model that is predicting: slower, same model, same answer.")
UNCALIBRATED_HELP = (
    "This checkpoint carries no calibration, so the probability is the model's raw softmax, which is often too "
    "sure of itself. A run's checkpoint is calibrated when its test report is written (Runs page).")


def reading_caption(device_is_cuda: bool, *, bidirectional: bool) -> str:
    """The caption under the row-by-row reading and the attribution, for a two-way or one-way model; the cuDNN
    note only on a GPU."""
    how = "from the top and from the bottom at once" if bidirectional else "from the top down"
    return READING_CAPTION.format(how=how) + (GPU_NOTE if device_is_cuda else "")


def reading_section(predictor: Predictor, x: np.ndarray, top: int, explain: Explanations) -> None:
    """How the network reads the model input `x` (28, 28) row by row, and which pixels pushed it towards its
    answer `top`: each worked out in the background, a note in its place until then."""
    cfg = predictor.checkpoint.model_config
    network = network_name(cfg)
    st.subheader(f"How the {network} reads your digit")
    left, right = st.columns([3, 2])
    rows = explain.get(("reading",), lambda stop: predictor.read_rows(x))
    if shown(left, rows, "how it reads it row by row"):
        left.plotly_chart(charts.reading_figure(x, rows, predictor.classes, network=network), key="reading",
                          on_select="ignore")
    attribution = explain.get(("attribution", "black", False, top),
                              lambda stop: predictor.attribution(x, top, should_stop=stop))
    if shown(right, attribution, "which pixels decided"):
        right.plotly_chart(charts.attribution_figure(x, attribution, predictor.classes[top]), key="attribution",
                           on_select="ignore")
    st.caption(reading_caption(predictor.device.type == "cuda", bidirectional=cfg.bidirectional))


DIRECTIONS_CAPTION = (
    "How strongly each row's pixels move the answer: the gradient of {name}'s logit with respect to the row's 28 "
    "pixels (their L2 norm, in logits per unit of ink: a pixel going from black, 0, to white, 1). {split} "
    "Gradients favour the rows a reader read last: a row read long ago reaches the answer through many steps, each "
    "of which can shrink its gradient (Ismail et al. 2019, arXiv:1910.12370), so a faint bar far from a reader's "
    "end is no proof that the row does not matter (Rows that mattered, under Inside, blanks each row instead).")
SPLIT = {
    "bidir": "The classifier adds what the forward reader (top down) and the backward reader (bottom up) give it, so "
             "the two bars are the parts of one gradient: expect the forward reader to lean on the bottom rows, which "
             "it read last, and the backward one on the top rows.",
    "last": "This net's classifier (the blog's `last` head) reads both readers after the bottom row, where the "
            "backward reader has read only that row itself (the rows above reach it through the layer below); the "
            "bars split the gradient between the two halves as they are.",
    "one-way": "A one-way net has one reader, top down, so one bar per row: expect it to lean on the bottom rows, "
               "which it read last.",
}


def directions_caption(name: str, *, bidirectional: bool, head: str, device_is_cuda: bool) -> str:
    """The caption under what each direction drew on, for class `name`: how its split reads for this net."""
    split = SPLIT[head if bidirectional else "one-way"]
    return DIRECTIONS_CAPTION.format(name=name, split=split) + (GPU_NOTE.replace("right-hand chart", "chart")
                                                                 if device_is_cuda else "")


def show_directions(predictor: Predictor, x: np.ndarray, top: int, explain: Explanations) -> None:
    """The gradient per row of class `top`'s logit for the model input `x`, split between the readers, and how to
    read it; worked out in the background (`explain`), a note in its place until then."""
    cfg = predictor.checkpoint.model_config
    chart, words = st.columns([3, 2])
    split = explain.get(("directions", top), lambda stop: predictor.direction_saliency(x, top))
    if shown(chart, split, "what each direction drew on"):
        chart.plotly_chart(gradient_charts.direction_rows_figure(split.rows(), predictor.classes[top], UNIT),
                           key="direction_rows", on_select="ignore")
    words.caption(directions_caption(predictor.classes[top], bidirectional=cfg.bidirectional, head=cfg.head,
                                     device_is_cuda=predictor.device.type == "cuda"))


def unfamiliar_notice(classes: list[str]) -> str:
    what = "a digit" if list(classes) == list(MNIST_CLASSES) else "any of the things it was trained on"
    return (f"This does not look like {what}: it is far from every class the model learnt, so the prediction "
            "above is a guess.")


def probability_line(assessment: Assessment) -> str:
    p = 100 * float(assessment.probs[assessment.top])
    return f"{p:.1f}% probability" + ("" if assessment.calibrated else " (uncalibrated)")


def show_verdict(container, predictor: Predictor, assessment: Assessment, classes: list[str]) -> None:
    """The "Prediction" metric, its probability (calibrated, or marked uncalibrated), and the notice when the
    input is unlike the training images. `container`: st, a column or any Streamlit container."""
    container.metric("Prediction", classes[assessment.top])
    container.caption(probability_line(assessment), help=None if predictor.calibrated else UNCALIBRATED_HELP)
    if assessment.familiar is False:
        container.warning(unfamiliar_notice(classes), icon=":material/help:")
