"""The digit's path through state space, its nearest training digits and LSTMVis-style matches
(brnn_core.inference.state_space), on a real trained checkpoint and the real mnist-sample digits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from brnn_core.checkpoint import load_checkpoint
from brnn_core.inference.state_space import (
    TrainingStates,
    build_for_checkpoint,
    final_state,
    hidden_states,
    states_path,
)


@pytest.fixture(scope="module")
def built(finished, sample, tmp_path_factory):
    checkpoint = tmp_path_factory.mktemp("states") / "best.pt"
    checkpoint.write_bytes(finished.best_ckpt.read_bytes())
    states = build_for_checkpoint(checkpoint, tmp_path_factory.mktemp("data"))
    return checkpoint, states, load_checkpoint(checkpoint).build_model("cpu").eval()


def test_a_training_digits_nearest_neighbour_is_itself(built, sample):
    _, states, model = built
    index = int(states.indices[7])
    x = sample.train_x[index][None].float() / 255
    final = final_state(hidden_states(model, x), model.cfg.hidden_size)[0].numpy()
    (nearest, *others) = states.neighbours(final, k=5)
    assert nearest.index == index and nearest.label == int(sample.train_y[index])
    assert nearest.distance == pytest.approx(0.0, abs=1e-4)
    assert all(o.distance >= nearest.distance for o in others) and len(others) == 4


def test_stored_beside_the_checkpoint_and_read_back(built):
    checkpoint, states, _ = built
    path = states_path(checkpoint)
    assert path.name == "best.pt.states.npz" and path.is_file()
    again = TrainingStates.load(path)
    for name in states.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(again, name), getattr(states, name))
    path.with_name("damaged.npz").write_bytes(b"not a zip")
    assert TrainingStates.load(path.with_name("damaged.npz")) is None
    assert TrainingStates.load(path.with_name("missing.npz")) is None


def test_the_path_and_the_class_paths(built, sample):
    _, states, model = built
    h = hidden_states(model, sample.train_x[:1].float() / 255)[0]
    hidden = h.shape[1] // 2
    path = states.path_of(h[:, :hidden].numpy())
    assert path.shape == (28, 2) and np.isfinite(path).all()
    assert states.class_paths.shape == (10, 28, 2) and np.isfinite(states.class_paths).all()
    assert states.pca_axes.shape == (2, hidden)
    np.testing.assert_allclose(states.pca_axes @ states.pca_axes.T, np.eye(2), atol=1e-4)  # orthonormal axes


def test_a_training_digit_matches_itself_first(built, sample):
    _, states, model = built
    index = int(states.indices[3])
    h = hidden_states(model, sample.train_x[index][None].float() / 255)[0]
    hidden = h.shape[1] // 2
    units, found = states.matches(h[:, :hidden].numpy(), "forward", (10, 18), threshold=0.1)
    assert len(units) > 0 and len(found) == 8
    assert found[0][0] == index and found[0][2] == pytest.approx(1.0)  # the same units on in the same rows
    assert all(a[2] >= b[2] for a, b in zip(found, found[1:], strict=False))
    none, _ = states.matches(h[:, :hidden].numpy(), "backward", (0, 27), threshold=2.0)  # tanh never exceeds 1
    assert len(none) == 0


def test_a_checkpoint_without_its_dataset_is_refused(tmp_path, finished):
    ckpt = torch.load(finished.best_ckpt, weights_only=True)
    ckpt["train_config"] = {}
    torch.save(ckpt, tmp_path / "bare.pt")
    with pytest.raises(ValueError, match="does not say which dataset"):
        build_for_checkpoint(tmp_path / "bare.pt", tmp_path)


def test_matches_on_another_layer_and_quantity(built, sample):
    from brnn_core.inference.internals import model_internals
    from brnn_core.inference.state_space import activations_path, build_activations, load_activations

    checkpoint, states, model = built
    values = build_activations(checkpoint, 0, "backward", "forget")
    assert activations_path(checkpoint, 0, "backward", "forget").is_file()
    np.testing.assert_array_equal(load_activations(activations_path(checkpoint, 0, "backward", "forget")), values)
    assert values.shape[:2] == (len(states.indices), 28) and ((values >= 0) & (values <= 1)).all()  # a gate
    index = int(states.indices[5])
    mine = model_internals(model, sample.train_x[index].float() / 255).layers[0]["backward"].get("forget").numpy()
    units, found = states.matches(mine, "backward", (5, 20), threshold=0.5, theirs=values)
    assert len(units) and found[0][0] == index and found[0][2] == pytest.approx(1.0)
