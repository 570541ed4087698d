"""TensorBoard event files of a run, mirrored from the run's own records (docs/run-directory.md, "TensorBoard").

A `TensorBoardLog` follows a run's files line by line (`SOURCES`: metrics.csv's rows as scalars, events.jsonl's
lines as text, gradient_flow.csv's measurements as scalars and a table) and writes what is new through
`torch.utils.tensorboard.SummaryWriter`, so a run's event files say what its own files say, live or after the fact:
the training session calls `follow` after it writes rows (`live`), and `runs export --format tensorboard` runs the
same code once over a finished run (`export_run`).
The files sit in the run's folder itself, so `tensorboard --logdir runs` names each run by its run id; the
hyperparameters are one HParams session per run whose group is its seed group. A later worker of the same run
(a resume) adds a file of its own that purges the steps after its checkpoint, as metrics.csv drops them.

Without the tensorboard package a run trains all the same and says so once in an event; nothing else here
needs it until a writer is made.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brnn_core.fileio import read_complete_lines
from brnn_core.runs import gradient_flow
from brnn_core.runs.gradient_flow import GradientFlowRecord, RecordLines
from brnn_core.runs.index import seed_group
from brnn_core.runs.rundir import METRIC_COLUMNS, Run, write_problem
from brnn_core.states import ACTIVE_STATES

if TYPE_CHECKING:
    from brnn_core.config import TrainConfig

EVENT_FILES = "events.out.tfevents.*"
INSTALL = "pip install 'brnn-dashboard[interop]' (or: pip install tensorboard==2.21.0)"
FLUSH_S = 5  # how stale a live event file may be (TensorBoard itself reloads every 5 s)
SCALARS = {"train": ("loss", "lr", "samples_per_s"), "val": ("loss", "accuracy"), "test": ("loss", "accuracy")}
CHANGES_TAG, EVENTS_TAG = "live_changes", "events"  # `set` events (live changes), every other kind
NOT_MIRRORED = ("traceback",)  # event kinds left out (a traceback is for worker.log readers, not a chart)
FLOW_TAG = "gradient_flow"  # gradient_flow/layer1_forward/row_read_first, .../row_read_last, .../first_over_last
# The Custom Scalars tab: every layer and direction of every run on one chart each (tags as regular expressions)
FLOW_LAYOUT = {"Gradient flow through time": {
    "‖∂ℓ/∂h_t‖ at the rows each direction reads first and last": ["Multiline", [rf"{FLOW_TAG}/.*/row_read_"]],
    "share reaching the row read first (first / last)": ["Multiline", [rf"{FLOW_TAG}/.*/first_over_last"]]}}


class TensorBoardMissing(ImportError):
    """The tensorboard package is not installed; the message says how to install it."""


def summary_writer(log_dir: Path, **kwargs: Any):
    """A SummaryWriter on `log_dir`, or TensorBoardMissing naming the install command."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch raises it when the tensorboard package is not installed
        raise TensorBoardMissing(f"the tensorboard package is not installed: {INSTALL}") from None
    _quiet_writer_thread_failures()
    return SummaryWriter(str(log_dir), **kwargs)


def _quiet_writer_thread_failures() -> None:
    """TensorBoard writes event files from a thread of its own; when a write fails (a read-only or full disk) it
    keeps the error, raises it again in the caller's next write, flush or close (where `Recorder` turns it into one
    warning event and the run goes on), and also lets it escape the thread, which prints a traceback into the
    user's terminal. Only that thread's OSErrors are kept quiet; every other exception goes to the hook that was
    there (Python's own, or one a user installed)."""
    previous = threading.excepthook
    if getattr(previous, "brnn_tensorboard_quiet", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if not (isinstance(args.exc_value, OSError) and type(args.thread).__name__ == "_AsyncWriterThread"):
            previous(args)

    hook.brnn_tensorboard_quiet = True
    threading.excepthook = hook


def has_events(folder: Path) -> bool:
    return any(Path(folder).glob(EVENT_FILES))


def hparams_of(train: dict) -> dict[str, bool | int | float | str]:
    """A run's training settings as HParams values (TensorBoard takes only these four types)."""
    return {k: v for k, v in (train or {}).items() if isinstance(v, bool | int | float | str)}


@dataclass(frozen=True)
class Source:
    """One run file mirrored line by line: its name in the run folder and what one complete line writes.

    A new record of a run (the gradient-flow profile) becomes part of the event files by one more entry in
    SOURCES: its file and a function that writes one of its lines through the log's `writer`."""

    name: str
    write: Callable[[TensorBoardLog, str], None]


def _metrics_row(log: TensorBoardLog, line: str) -> None:
    values = line.split(",")
    if len(values) != len(METRIC_COLUMNS) or values[0] == "step":  # the header, or a damaged line
        return
    row = dict(zip(METRIC_COLUMNS, values, strict=True))
    try:
        step = int(float(row["step"]))
    except ValueError:
        return
    log.step = max(log.step, step)
    walltime = log.walltime(row.get("elapsed_s"))
    if row["split"] == "train":
        log.row_logged(step, walltime)
    for name in SCALARS.get(row["split"], ()):
        with contextlib.suppress(ValueError):
            value = float(row[name])
            if math.isfinite(value):
                log.writer.add_scalar(f"{row['split']}/{name}", value, step, walltime=walltime)
    if row["split"] != "train":  # an epoch ended (or the run): show it now, not at the next flush
        log.writer.flush()


def _event_line(log: TensorBoardLog, line: str) -> None:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return
    if not isinstance(event, dict) or event.get("kind") in NOT_MIRRORED:
        return
    step = event.get("step") if isinstance(event.get("step"), int) else log.step
    tag = CHANGES_TAG if event.get("kind") == "set" else EVENTS_TAG
    walltime = _event_time(event.get("time")) if log.clock is not None else None
    log.writer.add_text(tag, f"**{event.get('kind')}** {event.get('message', '')}", step, walltime=walltime)


def _flow_line(log: TensorBoardLog, line: str) -> None:
    record = log.flow_lines.add(line)
    if record is not None:  # the line completed one layer's and direction's measurement
        _flow_record(log, record)


def _flow_record(log: TensorBoardLog, record: GradientFlowRecord) -> None:
    """One measurement as scalars (the ends of the profile and their ratio) and the whole profile as a table."""
    if not log.flow_layout_written:
        log.writer.add_custom_scalars(FLOW_LAYOUT)
        log.flow_layout_written = True
    tag, walltime = f"{FLOW_TAG}/layer{record.layer}_{record.direction}", log.walltime_at(record.step)
    first, last = record.in_reading_order[0], record.in_reading_order[-1]
    for name, value in (("row_read_first", first), ("row_read_last", last),
                        ("first_over_last", first / last if last else math.nan)):
        if math.isfinite(value):
            log.writer.add_scalar(f"{tag}/{name}", value, record.step, walltime=walltime)
    table = "\n".join(f"| {row} | {norm:.3g} |" for row, norm in enumerate(record.norms))
    log.writer.add_text(f"{tag}/profile", f"‖∂ℓ/∂h_t‖ per image row t (0 the top) at step {record.step}\n\n"
                                          f"| row | ‖∂ℓ/∂h_t‖ |\n| --- | --- |\n{table}", record.step,
                        walltime=walltime)


SOURCES = (Source("metrics.csv", _metrics_row), Source("events.jsonl", _event_line),
           Source(gradient_flow.FILE, _flow_line))


def _event_time(stamp: object) -> float | None:
    """events.jsonl's local "2026-11-29T20:45:12.345" as seconds since the epoch."""
    try:
        whole, _, ms = str(stamp).partition(".")
        return time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + int(ms or 0) / 1000
    except (ValueError, OverflowError):
        return None


class TensorBoardLog:
    """Mirrors one run's records into event files in `target` (the run's folder unless exporting elsewhere).

    `clock`: None for a live run (events carry the time they are written); else the run's start time, so that
    an export places each row at its start + elapsed_s."""

    def __init__(self, run: Run, target: Path | None = None, *, clock: float | None = None):
        self.run, self.target, self.clock = run, Path(target or run.path), clock
        self.step = 0  # the last step mirrored: text events without a step are placed there
        self.flow_lines, self.flow_layout_written = RecordLines(), False
        self._row_steps: list[int] = []  # an export's training rows: their steps and times (walltime_at)
        self._row_times: list[float] = []
        fresh = not has_events(self.target)
        # A first writer mirrors the run's files from their start; a later one (a resume) from where they end
        # now, purging the steps after its checkpoint that the earlier writer may have written.
        self.offsets = {s.name: 0 if fresh else _size(self.run.path / s.name) for s in SOURCES}
        if not fresh:
            self.step = _last_step(run)
            _wait_to_sort_last(self.target)
        self.writer = summary_writer(self.target, flush_secs=FLUSH_S,
                                     **({} if fresh else {"purge_step": self.step + 1}))
        if fresh:
            self._hparams()

    def walltime(self, elapsed_s: str | None) -> float | None:
        if self.clock is None:
            return None
        try:
            return self.clock + float(elapsed_s or 0)
        except ValueError:
            return None

    def row_logged(self, step: int, walltime: float | None) -> None:
        if walltime is not None and (not self._row_steps or step >= self._row_steps[-1]):
            self._row_steps.append(step)
            self._row_times.append(walltime)

    def walltime_at(self, step: int) -> float | None:
        """An export's time for a record made at `step` that has no time of its own (a gradient-flow measurement):
        that of the last training row logged by then, else the run's start. Live: None (now)."""
        if self.clock is None:
            return None
        before = bisect.bisect_right(self._row_steps, step) - 1
        return self._row_times[before] if before >= 0 else self.clock

    def _hparams(self) -> None:
        """The run's settings as an HParams session, grouped with the other seeds of its settings; the metrics
        the HParams tab shows are the last values of its scalars (val/accuracy, test/accuracy, ...)."""
        from tensorboard.plugins.hparams import summary_v2

        train = self.run.config().get("train") or {}
        started = self.run.stored_status().get("started") or self.run.config().get("created") or time.time()
        summary = summary_v2.hparams_pb(hparams_of(train), trial_id=seed_group(train), start_time_secs=started)
        self.writer.file_writer.add_summary(summary, walltime=self.clock)

    def follow(self) -> None:
        """Write what the run's files gained since the last call."""
        for source in SOURCES:
            lines, self.offsets[source.name] = read_complete_lines(self.run.path / source.name,
                                                                  self.offsets[source.name])
            for line in lines:
                source.write(self, line)

    def close(self) -> None:
        """Mirror what is left and close the event file (the run ended, or its worker is leaving it)."""
        self.follow()
        self.writer.close()


def _wait_to_sort_last(folder: Path) -> None:
    """Wait until a new event file's name sorts after every one in `folder` (at most a second).

    TensorBoard reads a folder's event files in name order, so a resume's file, whose first record purges the
    steps after its checkpoint, must come after the earlier files or those steps come back. The name begins with
    the second the file is made in; within one second it goes on with host, process id and a counter, compared
    as text (pid 10000 sorts before pid 9999), so only a later second is sure to sort last."""
    newest = max((_second_made(path) for path in folder.glob(EVENT_FILES)), default=0)
    wait = newest + 1 - time.time()
    if 0 < wait <= 1:  # more would mean an earlier file from the future (a clock set back): waiting cannot help
        time.sleep(wait)


def _second_made(path: Path) -> int:
    try:
        return int(path.name.split(".")[3])  # events.out.tfevents.<second>.<host>.<pid>.<counter>
    except (IndexError, ValueError):
        return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _last_step(run: Run) -> int:
    steps = run.metrics()["step"].dropna()
    return int(steps.max()) if len(steps) else 0


def live(run: Run, cfg: TrainConfig) -> TensorBoardLog | None:
    """The log a training run keeps while it trains: None when its config turns it off, or (said once in an
    event) when the tensorboard package is missing."""
    if not cfg.tensorboard:
        return None
    try:
        return TensorBoardLog(run)
    except TensorBoardMissing as exc:
        run.log_event("tensorboard", f"no TensorBoard files for this run: {exc}; it trains all the same")
    except Exception as exc:  # noqa: BLE001 - optional files never keep a run from training
        run.log_event("warning", f"no TensorBoard files for this run ({type(exc).__name__}: {exc}); it trains all "
                                 "the same")
    return None


def export_run(run: Run, target: Path | None = None) -> TensorBoardLog:
    """Event files for a run made without them (its metrics.csv, events.jsonl and config.json), in `target`
    (its own folder by default). The caller checks that there are none yet and that no worker writes them."""
    status = run.stored_status()
    log = TensorBoardLog(run, target, clock=status.get("started") or status.get("created") or
                         run.config().get("created") or time.time())
    log.close()
    return log


def export_runs(runs_dir: Path, run_ids: list[str], out: Path | None = None) -> list[tuple[str, str]]:
    """`runs export --format tensorboard`: event files for each run that has none, in its own folder (`out`
    None: `tensorboard --logdir RUNS` then shows old and new runs alike) or in `out`/<run id>. A run still
    training, or one whose folder leads out of the runs folder, is left alone. Returns (run id, what happened)."""
    done = []
    for run_id in run_ids:
        run = Run(Path(runs_dir) / run_id)
        target = Path(out) / run_id if out is not None else run.path
        if write_problem(run.path):  # the one check every writer of a run asks (runs.rundir)
            done.append((run_id, "skipped: its folder leads out of the runs folder (a link); nothing written"))
        elif run.status().get("state") in ACTIVE_STATES:
            done.append((run_id, f"skipped: still {run.status().get('state')}; export it once it has ended"))
        elif has_events(target):
            done.append((run_id, f"skipped: {target} already has TensorBoard files"))
        else:
            target.mkdir(parents=True, exist_ok=True)
            log = export_run(run, target)
            done.append((run_id, f"written to {target} (up to step {log.step})"))
    return done
