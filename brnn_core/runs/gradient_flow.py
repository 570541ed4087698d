"""gradient_flow.csv: how strongly the training loss reaches back to each row's hidden state, while a run trains.

Long format, one line per (measurement, layer, direction, row): `step,epoch,layer,direction,row,grad_norm`
(docs/run-directory.md), readable with `pandas.read_csv`. The training worker appends whole measurements in one
write (`fileio.append_line`), so a run killed at any moment leaves whole lines. `read_gradient_flow` is the reader
for pages and notebooks, `profile` one run's latest (or recent mean) row profile per layer and direction, which
the Train page draws and a comparison of runs puts side by side. The measurement itself is
training.gradient_flow's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from brnn_core.fileio import append_line, inside, keep_rows, read_complete_lines

FILE = "gradient_flow.csv"
COLUMNS = ["step", "epoch", "layer", "direction", "row", "grad_norm"]
ROWS = 28  # every dataset's images have 28 rows (data.datasets): one record is this many lines


@dataclass(frozen=True)
class GradientFlowRecord:
    """One measurement of one layer and direction: `norms[t]` is ‖∂ℓ/∂h_t‖ at image row t (row 0 the top), the
    mean over the probe batch's images of the L2 norm over hidden units of the gradient of that image's loss ℓ
    with respect to the state h_t, by every path (through the later rows and the layers above)."""

    step: int  # optimizer steps taken before the measurement (the weights it measured)
    epoch: float  # where in training, in epochs (as metrics.csv's training rows)
    layer: int  # from 1, the layer that reads the image
    direction: str  # forward (reads rows top down) or backward
    norms: tuple[float, ...]

    @property
    def in_reading_order(self) -> tuple[float, ...]:
        """The norms from the row this direction reads first to the row it reads last (backward: bottom row first)."""
        return self.norms if self.direction == "forward" else self.norms[::-1]

    def lines(self) -> list[str]:
        return [f"{self.step},{round(self.epoch, 4)},{self.layer},{self.direction},{row},{norm:.6g}"
                for row, norm in enumerate(self.norms)]


class RecordLines:
    """The file's lines gathered back into whole records, for a reader that follows the file as it grows (the
    TensorBoard mirror): a record is handed out once all its rows have arrived, whichever reads brought them."""

    def __init__(self):
        self._rows: dict[tuple[int, float, int, str], dict[int, float]] = {}

    def add(self, line: str) -> GradientFlowRecord | None:
        """Take one line; the record it completes, else None (the header and damaged lines are skipped)."""
        values = line.split(",")
        if len(values) != len(COLUMNS):
            return None
        try:
            step, epoch, layer = int(values[0]), float(values[1]), int(values[2])
            row, norm = int(values[4]), float(values[5])
        except ValueError:
            return None
        key = (step, epoch, layer, values[3])
        rows = self._rows.setdefault(key, {})
        rows[row] = norm
        if set(rows) != set(range(ROWS)):
            return None
        del self._rows[key]
        return GradientFlowRecord(step, epoch, layer, values[3], tuple(rows[t] for t in range(ROWS)))


def append_records(path: Path, records: Iterable[GradientFlowRecord]) -> None:
    """Append whole measurements in one write; the header first when the file is new. A file that is a link out of
    its run's folder is refused (ValueError): nothing is written through it."""
    path = Path(path)
    if not inside(path, path.parent):
        raise ValueError(f"{path} is a link to {os.path.realpath(path)}, outside its run's folder: nothing is written "
                         f"through it; delete the link to record the gradient flow, or set gradient_flow_every=0")
    lines = [line for record in records for line in record.lines()]
    if not path.is_file() or path.stat().st_size == 0:
        lines.insert(0, ",".join(COLUMNS))
    if lines:
        append_line(path, "\n".join(lines))


def read_gradient_flow(path: Path) -> pd.DataFrame:
    """The file as a DataFrame of COLUMNS (empty when missing); a torn or damaged line is skipped."""
    lines, _ = read_complete_lines(Path(path))
    rows = [line.split(",") for line in lines[1:] if line.count(",") == len(COLUMNS) - 1]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for column in COLUMNS:
        if column != "direction":
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame = frame.dropna(subset=["step", "layer", "row"])
    return frame.astype({"step": int, "layer": int, "row": int}).reset_index(drop=True)


def profile(frame: pd.DataFrame, last: int = 1) -> pd.DataFrame:
    """One run's profile: grad_norm per layer, direction and row at its latest measurement, or the mean over its
    `last` latest ones (columns layer, direction, row, grad_norm; empty without measurements)."""
    if frame.empty:
        return pd.DataFrame(columns=["layer", "direction", "row", "grad_norm"])
    steps = sorted(frame["step"].unique())[-max(1, int(last)):]
    recent = frame[frame["step"].isin(steps)]
    return recent.groupby(["layer", "direction", "row"], as_index=False)["grad_norm"].mean()


def run_profile(run_path: Path, last: int = 1) -> pd.DataFrame:
    """`profile` of the run in folder `run_path`."""
    return profile(read_gradient_flow(Path(run_path) / FILE), last)


def drop_from(path: Path, step: int) -> int:
    """Remove the measurements at `step` and after (a resume from that step's checkpoint measures them again), so
    no step repeats; the number of lines removed."""
    return keep_rows(path, lambda row_step: row_step < step) if Path(path).is_file() else 0
