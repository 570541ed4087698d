"""What the Predict page says about one prediction: the verdict with its calibrated probability and a notice
when the drawing does not look like what the model was trained on, and the look-inside caption in plain words."""

from __future__ import annotations

from brnn_core.data.datasets import MNIST_CLASSES
from brnn_core.inference.predictor import Assessment, Predictor

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
