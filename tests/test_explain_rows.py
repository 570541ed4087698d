"""Row importance, the baselines of integrated gradients and the randomised-weights sanity check
(brnn_core.inference.explain), on a real trained checkpoint and real MNIST digits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from brnn_core.checkpoint import load_checkpoint
from brnn_core.inference.explain import (
    BASELINES,
    baseline_image,
    integrated_gradients,
    randomized_copy,
    row_importance,
)


@pytest.fixture(scope="module")
def model(finished):
    return load_checkpoint(finished.best_ckpt).build_model("cpu").eval()


def digit(sample, k: int = 0) -> torch.Tensor:
    return sample.test_x[k].float() / 255


def test_blanking_a_blank_row_changes_nothing_and_ink_rows_matter(model, sample):
    x = digit(sample)
    target = int(model(x[None]).argmax())
    drop = row_importance(model, x, target)
    blank = (x.sum(dim=1) == 0).numpy()
    assert blank.any() and (~blank).any()  # an MNIST digit has empty rows at the top and bottom
    assert (drop[blank] == 0).all()
    assert np.abs(drop[~blank]).max() > 1e-4  # blanking some row of ink moves the answer
    # the same numbers as blanking one row by hand: the drop in ln(P(target) / P(not target))
    t = int(np.argmax(np.abs(drop)))
    blanked = x.clone()
    blanked[t] = 0
    with torch.no_grad():
        p = torch.softmax(model(torch.stack([x, blanked])).double(), dim=1)[:, target]
    odds = torch.log(p / (1 - p))
    assert drop[t] == pytest.approx(float(odds[0] - odds[1]), rel=1e-3, abs=1e-4)


def test_rows_that_mattered_still_differ_for_a_confident_answer(model, sample):
    """In probability every row of a confident answer moves it by a fraction of a point ("no row mattered");
    in log-odds the rows that carry the digit stand out."""
    x = torch.stack([digit(sample, k) for k in range(100)])
    with torch.no_grad():
        probs = torch.softmax(model(x), dim=1)
    k = int(probs.max(dim=1).values.argmax())  # the most confident of the first 100 test digits
    target = int(probs[k].argmax())
    assert float(probs[k, target]) > 0.95
    drop = row_importance(model, x[k], target)
    blanked = x[k].repeat(28, 1, 1)
    blanked[torch.arange(28), torch.arange(28)] = 0
    with torch.no_grad():
        prob_drop = float(probs[k, target]) - torch.softmax(model(blanked), dim=1)[:, target]
    # near P = 1 a change in log-odds is the change in P divided by P (1 - P): the bars that were all near 0 now
    # show which rows carry the digit
    assert np.abs(drop).max() > 10 * float(prob_drop.abs().max())
    assert np.abs(drop).max() - np.median(np.abs(drop[drop != 0])) > 10 * float(prob_drop.abs().max()) / 2


def test_baselines(sample):
    x = digit(sample)
    assert torch.equal(baseline_image(x, "black"), torch.zeros_like(x))
    assert torch.equal(baseline_image(x, "grey"), torch.full_like(x, 0.5))
    blurred = baseline_image(x, "blurred")
    assert blurred.shape == x.shape and 0 < blurred.max() < x.max() and (blurred > 0).sum() > (x > 0).sum()
    with pytest.raises(ValueError, match="unknown baseline"):
        baseline_image(x, "white")
    assert BASELINES == ("black", "blurred", "grey")


@pytest.mark.slow
def test_black_gives_background_zero_and_other_baselines_do_not(model, sample):
    x = digit(sample)
    black, target, _ = integrated_gradients(model, x, baseline="black")
    assert (black[x.numpy() == 0] == 0).all()
    grey, _, _ = integrated_gradients(model, x, target, baseline="grey")
    assert np.abs(grey[x.numpy() == 0]).sum() > 0  # from grey, the background is a difference too


@pytest.mark.slow
def test_a_randomised_copy_explains_differently(model, sample):
    x = digit(sample)
    trained, target, _ = integrated_gradients(model, x)
    twin = randomized_copy(model, seed=1)
    assert not torch.equal(twin.fc.weight, model.fc.weight)
    before = torch.random.get_rng_state()
    randomized_copy(model, seed=2)
    assert torch.equal(torch.random.get_rng_state(), before)
    random, _, _ = integrated_gradients(twin, x, target)
    corr = np.corrcoef(trained.ravel(), random.ravel())[0, 1]
    assert corr < 0.9, corr  # a different explanation: the trained one depends on what was learned
