"""A seed group's band, computed for many runs at once and kept per version of their metrics.csv files
(brnn_core.series, brnn_core.runs.bands): the same numbers as the DataFrame path, each file parsed once, a band
rebuilt only when a file behind it changed."""

from __future__ import annotations

import numpy as np
import pytest

from brnn_core import charts
from brnn_core.config import TrainConfig
from brnn_core.runs.bands import BandCache
from brnn_core.runs.index import RunIndex
from brnn_core.runs.rundir import Run, RunError, create_run, new_run_config
from brnn_core.series import ema, ema_rows, group_curve


@pytest.mark.parametrize("weight", [0.0, 0.6, 0.99, 1.0])
def test_ema_rows_is_ema_of_each_row(weight):
    rng = np.random.default_rng(0)
    rows = [rng.random(50), rng.random(7), np.array([]), np.array([np.nan, 1.0, np.inf, 2.0, np.nan, 3.0])]
    for got, row in zip(ema_rows(rows, weight), rows, strict=True):
        np.testing.assert_array_equal(got, ema(row, weight))


def test_group_curve_of_runs_with_the_same_steps_is_their_mean_and_std():
    x = np.arange(10.0)
    ys = [np.sin(x + k) for k in range(5)]
    curve = group_curve((x, y) for y in ys)
    np.testing.assert_array_equal(curve.x, x)
    np.testing.assert_allclose(curve.mean, np.mean(ys, axis=0))
    np.testing.assert_allclose(curve.std, np.std(ys, axis=0, ddof=1))
    repeated = group_curve([([1, 1, 2], [5.0, 1.0, 2.0]), ([1, 1, 2], [3.0, 3.0, 4.0])])  # not increasing: the
    np.testing.assert_allclose(repeated.mean, [2.0, 3.0])  # general path, which keeps a step's last value


def seed_runs(runs_dir, seeds, points: int = 30) -> list[str]:
    """Runs whose metrics.csv the recorder's own writer filled: a training row every 10 steps, a validation row
    per epoch, losses that differ by seed."""
    ids = []
    for seed in seeds:
        cfg = TrainConfig(dataset="mnist-sample", device="cpu", seed=seed)
        run = create_run(runs_dir, new_run_config(cfg, None), run_id=f"20000101-00000{seed}-mnist-sample-s{seed}")
        for k in range(1, points + 1):
            run.log_metric(step=10 * k, epoch=k / 10, split="train", loss=2.0 / k + 0.1 * seed, lr=0.01)
            if k % 10 == 0:
                run.log_metric(step=10 * k, epoch=k // 10, split="val", loss=1.0 / k + 0.05 * seed, accuracy=0.9)
        ids.append(run.id)
    return ids


def test_a_band_is_the_dataframe_paths_band_and_is_kept_until_a_file_changes(tmp_path):
    runs_dir = tmp_path / "runs"
    ids = seed_runs(runs_dir, (0, 1, 2))
    cache = BandCache()
    frames = [Run(runs_dir / rid).metrics() for rid in ids]
    for what, smoothing in (("train", 0.6), ("train", 0.0), ("val", 0.0)):
        band, expected = cache.band(runs_dir, ids, what, smoothing), charts.frames_band(frames, what, smoothing)
        assert band.n == 3
        for name in ("x", "mean", "std"):
            np.testing.assert_allclose(getattr(band, name), getattr(expected, name))
    assert cache.reads == 3  # each file parsed once for all three bands
    again = cache.band(runs_dir, ids, "train", 0.6)
    assert again is cache.band(runs_dir, ids, "train", 0.6) and cache.builds == 3 and cache.reads == 3
    # a run writes a row: that run is read again, the band built again, the others come from the cache
    Run(runs_dir / ids[1]).log_metric(step=310, epoch=3.1, split="train", loss=0.01, lr=0.01)
    changed = cache.band(runs_dir, ids, "train", 0.6)
    assert changed is not again and cache.reads == 4 and cache.builds == 4
    assert list(changed.x) == list(again.x)  # step 310 is not in every run: the band stays on the common steps


def test_a_run_without_readable_metrics_adds_nothing_and_a_bad_id_is_refused(tmp_path):
    runs_dir = tmp_path / "runs"
    ids = seed_runs(runs_dir, (0, 1, 2))
    (runs_dir / ids[2] / "metrics.csv").unlink()
    (runs_dir / ids[2] / "metrics.csv").mkdir()  # a folder where the file should be
    band = BandCache().band(runs_dir, ids, "val")
    assert band.n == 2
    assert BandCache().band(runs_dir, [ids[2]], "val") is None
    with pytest.raises(RunError):
        BandCache().band(runs_dir, [ids[0], "../elsewhere"], "train")
    with pytest.raises(ValueError, match="what='test'"):
        BandCache().band(runs_dir, ids, "test")


def test_the_run_index_hands_out_one_band_per_version(tmp_path):
    runs_dir = tmp_path / "runs"
    ids = seed_runs(runs_dir, range(5))
    index = RunIndex(runs_dir)
    band = index.band(ids, "train", 0.6)
    assert band.n == 5 and index.band(ids, "train", 0.6) is band
    assert index.band(ids, "train", 0.5) is not band  # another smoothing is another band
