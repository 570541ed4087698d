"""A dataset's pen-stroke copies of training digits made ahead of its first run (as_drawn's cache), with progress.

`python -m brnn_core predraw DATASET` (a job that waits for the CPU in the queue, cli.cmd_predraw) prints one
progress line at a time; the dashboard starts it when its server starts (ui/warmup.py), so the first run on the
default dataset reads the pen-stroke copies instead of making them, and the sweep CLI calls `predraw` in its turn
before its trials. A dataset already done leaves a marker file, so a later server does not even load it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path

from brnn_core.config import resolve_drawn_share
from brnn_core.data import as_drawn
from brnn_core.data.datasets import find_files

PROGRESS = re.compile(r"(\d[\d,]*)/(\d[\d,]*)\s*$")


def marker(dataset: str, share: float, data_dir: Path) -> Path:
    return as_drawn.cache_dir(data_dir) / f"predrawn-v{as_drawn.VERSION}-{dataset}-{share:g}.done"


def predraw(dataset: str, data_dir: Path, share: float, progress: Callable[[str], None] | None = None) -> None:
    """Make sure `dataset`'s training digits at `share` (0 for datasets that are not digits) are in the cache."""
    from brnn_core.data.loading import load_dataset  # torchvision and pandas: only for a process that draws

    share = resolve_drawn_share(share, dataset)
    if share <= 0:
        return
    as_drawn.drawn_copies(load_dataset(dataset, data_dir).train_x, share, data_dir, progress=progress)
    with contextlib.suppress(OSError):  # no marker: the next server checks the cache again (a load of the dataset)
        marker(dataset, share, data_dir).touch()


def needed(dataset: str, data_dir: Path, share: float) -> bool:
    """Whether a background predraw of `dataset` would do anything: a digit dataset on disk, not yet done."""
    share = resolve_drawn_share(share, dataset)
    on_disk = dataset == "mnist-sample" or bool(find_files(dataset, data_dir))  # never a download in the background
    return share > 0 and on_disk and not marker(dataset, share, data_dir).exists()


def last_progress(log: Path) -> tuple[str, int, int] | None:
    """(the last line of a predraw log, done, total): done and total are 0 in a line without `k/n`; None before
    the first line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    if not lines:
        return None
    found = PROGRESS.search(lines[-1])
    done, total = (int(g.replace(",", "")) for g in found.groups()) if found else (0, 0)
    return lines[-1], done, total
