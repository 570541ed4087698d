"""Training-batch augmentation: what it does to real digits, reproducibility, and that it reaches
training batches only (never validation or test), with live changes acknowledged like lr."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import STEPS_PER_EPOCH, make_run

from brnn_core.checkpoint import load_checkpoint
from brnn_core.config import AUGMENT_AUTO, AUGMENT_LEVELS, DATASET_NAMES, TrainConfig, resolve_augment
from brnn_core.data.augment import (
    LEVELS,
    Augmenter,
    AugmentStrength,
    affine_matrices,
    augment_batch,
    change_thickness,
    pool3x3,
    sampling_grid,
    step_generator,
)
from brnn_core.data.batching import to_input
from brnn_core.data.datasets import DATASETS
from brnn_core.model import ModelConfig, RecurrentClassifier
from brnn_core.training import session
from brnn_core.training.engine import FitHooks, evaluate, fit, make_optimizer
from brnn_core.training.worker import train_run_dir

CPU = torch.device("cpu")


def gen(seed: int = 0, step: int = 0) -> torch.Generator:
    return step_generator(seed, step, CPU)


@pytest.fixture(scope="module")
def digits(sample) -> torch.Tensor:
    return to_input(sample.train_x[:1000])  # (1000, 28, 28) real MNIST digits in [0, 1]


def ink(x: torch.Tensor) -> torch.Tensor:
    return x.float().sum(dim=(1, 2))  # (B,)


def centre_of_mass(x: torch.Tensor) -> torch.Tensor:
    grid = torch.arange(28, dtype=torch.float32)
    mass = ink(x)
    return torch.stack([(x.sum(2) * grid).sum(1) / mass, (x.sum(1) * grid).sum(1) / mass], dim=1)  # (B, 2) y, x


# ------------------------------------------------------------------ the levels and the config
def test_levels_and_auto_cover_the_config_choices():
    assert set(LEVELS) | {"auto"} == set(AUGMENT_LEVELS)
    assert set(AUGMENT_AUTO) == set(DATASET_NAMES) == set(DATASETS)
    assert all(level in LEVELS for level in AUGMENT_AUTO.values())
    assert resolve_augment("auto", "mnist-sample") == AUGMENT_AUTO["mnist-sample"] != "off"
    assert resolve_augment("auto", "fashion-mnist") == "off" and resolve_augment("strong", "fashion-mnist") == "strong"
    strengths = [LEVELS[name] for name in ("light", "medium", "strong")]
    for weaker, stronger in zip(strengths, strengths[1:], strict=False):  # each level at least as strong as the last
        assert all(getattr(weaker, f) <= getattr(stronger, f) for f in ("rotate_deg", "scale", "shear_deg",
                                                                          "shift_px", "thickness"))


def test_config_validates_augment_and_says_what_auto_means():
    assert TrainConfig().augment == "auto" and "augment" in TrainConfig.field_names()
    assert TrainConfig.from_dict({"augment": "strong"}).augment == "strong"
    with pytest.raises(ValueError, match="augment: 'heavy' is not one of: auto, off, light, medium, strong"):
        TrainConfig.from_dict({"augment": "heavy"})
    help_text = TrainConfig.help_for("augment")
    assert "(never on validation or test)" in help_text
    assert f"{AUGMENT_AUTO['mnist-sample']} for mnist-sample" in help_text and "off for fashion-mnist" in help_text


# ------------------------------------------------------------------ the building blocks
def test_pool3x3_is_max_pool_dilation_and_min_pool_erosion(digits):
    x = digits[:50].unsqueeze(1)  # (50, 1, 28, 28)
    assert torch.equal(pool3x3(x, torch.maximum, -math.inf), F.max_pool2d(x, 3, stride=1, padding=1))
    assert torch.equal(pool3x3(x, torch.minimum, math.inf), -F.max_pool2d(-x, 3, stride=1, padding=1))


def test_sampling_grid_is_affine_grid():
    theta = affine_matrices(16, LEVELS["strong"], gen(), CPU)
    expected = F.affine_grid(theta, [16, 1, 28, 28], align_corners=False)
    assert torch.allclose(sampling_grid(theta, 28, 28), expected, atol=1e-6)


def test_affine_matrices_stay_within_the_strength():
    n = 2000
    rot = affine_matrices(n, AugmentStrength(rotate_deg=10), gen(1), CPU)[:, :, :2]  # (n, 2, 2)
    assert torch.allclose(rot @ rot.transpose(1, 2), torch.eye(2).expand(n, 2, 2), atol=1e-5)  # pure rotations
    angles = torch.rad2deg(torch.atan2(rot[:, 1, 0], rot[:, 0, 0])).abs()
    assert angles.max() <= 10 + 1e-4 and angles.max() > 9  # the whole range is used
    size = affine_matrices(n, AugmentStrength(scale=0.2), gen(2), CPU)
    factor = 1 / size[:, 0, 0]  # content grows by 1/inverse scale
    assert factor.min() >= 1 / 1.2 - 1e-5 and factor.max() <= 1.2 + 1e-5
    assert abs(torch.log(factor).mean()) < 0.01  # log-uniform: shrinking as likely as growing
    shift = affine_matrices(n, AugmentStrength(shift_px=3), gen(3), CPU)[:, :, 2] * 14  # back to pixels
    assert shift.abs().max() <= 3 + 1e-4 and shift.abs().max() > 2.9


def test_thicker_strokes_add_ink_thinner_remove_it(digits):
    x = digits[:200].unsqueeze(1)
    ones = torch.ones(len(x))
    thicker, thinner = change_thickness(x, ones), change_thickness(x, -ones)
    assert (ink(thicker[:, 0]) > ink(x[:, 0])).all() and (ink(thinner[:, 0]) < ink(x[:, 0])).all()
    assert ink(thicker[:, 0]).mean() > 1.5 * ink(x[:, 0]).mean()  # a 3x3 dilation widens a 2-3 px stroke a lot
    assert torch.equal(change_thickness(x, torch.zeros(len(x))), x)
    half = change_thickness(x, 0.5 * ones)
    assert torch.allclose(half, (x + thicker) / 2, atol=1e-6)  # the amount blends linearly


# ------------------------------------------------------------------ whole batches
def test_geometry_changes_images_but_keeps_their_ink(digits):
    geometric = AugmentStrength(rotate_deg=12, scale=0.12, shear_deg=15, shift_px=2)
    out = augment_batch(digits, geometric, gen())
    assert out.shape == digits.shape and out.dtype == digits.dtype
    assert out.min() >= 0 and out.max() <= 1
    changed = (out - digits).abs().sum(dim=(1, 2)) / ink(digits)  # moved ink, relative to the digit's ink
    assert changed.min() > 0.05 and changed.mean() > 0.4  # every image changed, most of them a lot
    ratio = ink(out) / ink(digits)
    assert abs(ratio.mean() - 1) < 0.03  # mean ink mass preserved (scale is log-uniform)
    assert ratio.min() > 0.6 and ratio.max() < 1.5


def test_shifts_move_the_centre_of_mass_by_up_to_the_strength(digits):
    out = augment_batch(digits, AugmentStrength(shift_px=3), gen(5))
    moved = centre_of_mass(out) - centre_of_mass(digits)  # (B, 2) in pixels
    assert moved.abs().max() < 3.3  # up to 3 px (plus a little ink cut at the border)
    assert moved.std(dim=0).min() > 1.2  # uniform in [-3, 3]: sd 1.73 in both directions
    assert abs(moved.mean()) < 0.2


def test_rotation_turns_a_bar(digits):
    bar = torch.zeros(1, 28, 28)
    bar[0, 13:15, 4:24] = 1.0  # a horizontal bar through the centre
    out = augment_batch(bar.expand(400, 28, 28), AugmentStrength(rotate_deg=20), gen(7))
    ys, xs = torch.meshgrid(torch.arange(28.0) - 13.5, torch.arange(28.0) - 13.5, indexing="ij")
    # the bar's orientation from its second moments: 0 for the original
    mxx, myy, mxy = ((out * xs * xs).sum((1, 2)), (out * ys * ys).sum((1, 2)), (out * xs * ys).sum((1, 2)))
    angle = torch.rad2deg(0.5 * torch.atan2(2 * mxy, mxx - myy))
    assert angle.abs().max() <= 21 and angle.abs().max() > 15 and angle.std() > 8


def test_thickness_level_thickens_some_strokes_and_thins_others(digits):
    out = augment_batch(digits, AugmentStrength(thickness=0.6), gen(9))
    ratio = ink(out) / ink(digits)
    assert (ratio > 1.1).float().mean() > 0.3 and (ratio < 0.9).float().mean() > 0.3


def test_fraction_leaves_the_other_images_untouched(sample, digits):
    strength = AugmentStrength(shift_px=3, thickness=0.5, fraction=0.4)
    out = augment_batch(digits, strength, gen(11))
    same = (out == digits).flatten(1).all(dim=1)  # (B,) image passed through exactly
    assert 0.5 < same.float().mean() < 0.7  # 60 % untouched, give or take the draw
    out8 = augment_batch(sample.train_x[:1000], strength, gen(11))
    assert torch.equal((out8 == sample.train_x[:1000]).flatten(1).all(dim=1), same)  # same draw for uint8


def test_same_seed_and_step_same_output_uint8_and_float(sample, digits):
    x8 = sample.train_x[:100]
    a = Augmenter(lambda: "strong", dataset="mnist-sample", seed=3)
    out8 = a(x8, 7)
    assert out8.dtype == torch.uint8 and torch.equal(out8, a(x8, 7))  # replayable: resume repeats it exactly
    assert not torch.equal(out8, a(x8, 8)) and not torch.equal(out8, Augmenter(
        lambda: "strong", dataset="mnist-sample", seed=4)(x8, 7))
    outf = a(to_input(x8), 7)
    assert outf.dtype == torch.float32 and (to_input(out8) - outf).abs().max() <= 0.5 / 255 + 1e-6
    assert torch.equal(x8, sample.train_x[:100])  # the source batch is not modified


def test_augmenter_reads_its_level_at_every_call(digits):
    live = {"augment": "off"}
    a = Augmenter(lambda: live["augment"], dataset="mnist-sample", seed=0)
    assert a(digits, 0) is digits
    live["augment"] = "strong"
    assert not torch.equal(a(digits, 0), digits)
    live["augment"] = "auto"
    assert torch.equal(a(digits, 0), augment_batch(digits, LEVELS[AUGMENT_AUTO["mnist-sample"]], gen(0, 0)))
    assert Augmenter(lambda: "auto", dataset="fashion-mnist", seed=0)(digits, 0) is digits


# ------------------------------------------------------------------ training only, never evaluation
class SpyAugmenter(Augmenter):
    """The real Augmenter, remembering what it returned for each step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outputs: dict[int, torch.Tensor] = {}
        self.levels: dict[int, str] = {}

    def __call__(self, images, step):
        out = super().__call__(images, step)
        self.outputs[step], self.levels[step] = out.clone(), self.level()
        return out


def test_fit_feeds_augmented_training_batches_and_plain_validation(sample):
    torch.manual_seed(0)
    model = RecurrentClassifier(ModelConfig(hidden_size=16, num_layers=1))
    seen: list[tuple[bool, torch.Tensor]] = []
    model.register_forward_pre_hook(lambda mod, args: seen.append((mod.training, args[0].detach().clone())))
    train_x, train_y = sample.train_x[:400], sample.train_y[:400]
    val_x, val_y = sample.train_x[400:650], sample.train_y[400:650]
    spy = SpyAugmenter(lambda: "strong", dataset="mnist-sample", seed=0)
    result = fit(model, make_optimizer(model.parameters(), "adam", 0.01), train_x, train_y, val_x, val_y,
                 epochs=2, batch_size=100, seed=0, eval_batch_size=125, hooks=FitHooks(augment=spy))
    assert result.state == "finished" and result.step == 8
    train_inputs = [x for training, x in seen if training]
    eval_inputs = [x for training, x in seen if not training]
    assert sorted(spy.outputs) == list(range(8))  # called once per training step, never for validation
    for step, x in enumerate(train_inputs):
        assert torch.equal(x, spy.outputs[step])  # the model trained on the augmented batch
    plain = to_input(val_x)
    assert len(eval_inputs) == 4  # 2 epochs x 2 validation batches
    for k, x in enumerate(eval_inputs):
        assert torch.equal(x, plain[(k % 2) * 125:(k % 2 + 1) * 125])  # validation images untouched


@pytest.mark.slow
def test_worker_run_with_strong_augmentation_reports_plain_test_accuracy(tmp_path, sample):
    run = make_run(tmp_path / "runs", hidden_size=16, num_layers=1, epochs=1, augment="strong")
    assert train_run_dir(run, data_dir=tmp_path / "data") == "finished"
    assert run.config()["augment"] == "strong"  # the level used is recorded in config.json
    model = load_checkpoint(run.best_ckpt).build_model()  # the run's architecture, input scale included
    test = evaluate(model, sample.test_x, sample.test_y)  # un-augmented test digits, evaluated here
    assert run.status()["test_acc"] == pytest.approx(test.accuracy, abs=1e-9)
    assert run.metrics().query("split == 'test'")["loss"].iloc[0] == pytest.approx(test.loss, rel=1e-5)


def test_auto_is_recorded_resolved(tmp_path):
    run = make_run(tmp_path / "runs", hidden_size=8, num_layers=1, epochs=1)
    assert run.config()["train"]["augment"] == "auto"
    assert train_run_dir(run, data_dir=tmp_path / "data") == "finished"
    assert run.config()["augment"] == AUGMENT_AUTO["mnist-sample"]


@pytest.mark.slow
def test_live_augment_change_is_applied_at_the_next_step_and_acknowledged(tmp_path, monkeypatch):
    run = make_run(tmp_path / "runs", hidden_size=8, num_layers=1, epochs=1, augment="off", log_interval=5)
    spies: list[SpyAugmenter] = []

    class UserAtStep5(SpyAugmenter):
        """After step 5 the user picks 'strong' on the Train page (the same command file the page writes)."""

        def __call__(self, images, step):
            out = super().__call__(images, step)
            if step == 5:
                self.sent = run.send_command("set", field="augment", value="strong")
                run.send_command("set", field="augment", value="heavy")  # not a level: refused, nothing changes
            return out

    def spy_factory(*args, **kwargs):
        spies.append(UserAtStep5(*args, **kwargs))
        return spies[-1]

    monkeypatch.setattr(session, "Augmenter", spy_factory)
    assert train_run_dir(run, data_dir=tmp_path / "data") == "finished"
    spy = spies[0]
    assert [spy.levels[s] for s in range(7)] == ["off"] * 6 + ["strong"]  # steps 0-5 plain, from step 6 on strong
    assert set(spy.levels[s] for s in range(6, STEPS_PER_EPOCH)) == {"strong"}
    events = run.events()
    [ack] = [e for e in events if e.get("command") == spy.sent]
    assert ack["kind"] == "set" and ack["message"] == "augment off -> strong at step 6"
    assert (ack["old"], ack["new"]) == ("off", "strong")
    [refused] = [e for e in events if e["kind"] == "warning" and "heavy" in e["message"]]
    assert "rejected augment='heavy'" in refused["message"]
    assert run.status()["live"]["augment"] == "strong"
    assert load_checkpoint(run.last_ckpt).train_config["live"]["augment"] == "strong"  # a resume keeps it
