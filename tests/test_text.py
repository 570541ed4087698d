"""Counted words (brnn_core.text.plural), and the pages that say a count of one."""

from __future__ import annotations

from helpers import copy_run, no_exception, open_page

from brnn_core.checkpoint import save_checkpoint
from brnn_core.data.datasets import MNIST_CLASSES
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.text import plural


def test_plural():
    assert [plural(n, "run") for n in (0, 1, 2, 1000)] == ["0 runs", "1 run", "2 runs", "1,000 runs"]
    assert plural(1, "more drawing") == "1 more drawing" and plural(3, "child", "children") == "3 children"


def test_a_one_layer_model_is_one_layer_on_the_predict_page(dirs, finished):
    runs_dir, _ = dirs
    run = copy_run(finished, runs_dir)
    one_layer = RecurrentClassifier(ModelConfig(hidden_size=16, num_layers=1))  # random weights: only its shape counts
    save_checkpoint(run.best_ckpt, one_layer, classes=list(MNIST_CLASSES))
    run.last_ckpt.unlink()
    at = open_page("pages/predict.py", "Draw a digit")
    no_exception(at)
    assert any("hidden 16, 1 layer, head" in c.value for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]
