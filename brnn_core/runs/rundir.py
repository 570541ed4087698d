"""The run directory: the only state shared by the worker, the CLI and the dashboard.

`Run` names a run's files (config.json, status.json, metrics.csv, events.jsonl, control.jsonl, checkpoints/,
worker.log: docs/run-directory.md) and reads them; every file is rewritten atomically or appended in whole
lines, so a run killed at any moment still reads cleanly. `stored_status()` is status.json as written;
`status()` is what a reader knows, where an active run whose worker is gone is `interrupted`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from brnn_core import __version__
from brnn_core.fileio import (
    append_line,
    atomic_write,
    atomic_write_json,
    inside,
    link_or_copy,
    read_complete_lines,
    read_json,
)
from brnn_core.runs.gradient_flow import FILE as GRADIENT_FLOW_FILE
from brnn_core.runs.protocol import command_line
from brnn_core.runs.status import RunStatus, effective_status, new_status, update_status
from brnn_core.states import ACTIVE_STATES, State

if TYPE_CHECKING:
    from brnn_core.config import TrainConfig

METRIC_COLUMNS = ["step", "epoch", "split", "loss", "accuracy", "lr", "samples_per_s", "elapsed_s"]
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


CONFIG_SECTIONS = ("train", "model", "parent", "sizes", "threads", "versions")  # objects in config.json


def config_damage(data: object) -> str | None:
    """Why a config.json's content is damaged (its run's note in listings), None when it is a whole object."""
    if not isinstance(data, dict):
        return f"config.json holds a JSON {type(data).__name__}, not an object"
    bad = [k for k in CONFIG_SECTIONS if k in data and not isinstance(data[k], dict)]
    return f"config.json's {', '.join(bad)} is not an object" if bad else None


def readable_config(data: object) -> dict:
    """What a config.json's content gives a reader: {} for anything but an object, and no section that is
    not an object (`"train": null`)."""
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if k not in CONFIG_SECTIONS or isinstance(v, dict)}

class RunError(ValueError):
    """A run that does not exist or a run id that is not acceptable."""


def linked_to(path: Path) -> Path | None:
    """Where a run folder really is when it is linked into its runs folder (a symlink, or a path that leads
    out of it); None for an ordinary run folder. A linked run is read-only here (docs/run-directory.md)."""
    path = Path(path)
    if os.path.islink(path) or not inside(path, path.parent):
        return Path(os.path.realpath(path))
    return None


def write_problem(path: Path) -> str | None:
    """Why nothing may be written, deleted or locked in the run folder `path` (None: it may): the folder is a
    link to a run elsewhere, or its checkpoints/ leads out of it. Every writer of a run asks this first."""
    path = Path(path)
    target = linked_to(path)
    if target is not None:
        return (f"run {path.name} is a link to {target}: a run linked into the runs folder is read-only here "
                f"(listed, never trained, tagged, pruned or deleted through the link); change it in its own "
                f"runs folder ({target.parent}), or remove the link to unlist it")
    if not inside(path / "checkpoints", path):
        return (f"run {path.name}'s checkpoints folder is a link to {os.path.realpath(path / 'checkpoints')}, "
                "outside the run: nothing is written or deleted through it; make checkpoints/ a real folder")
    return None


def check_writable(path: Path) -> None:
    """RunError (with `write_problem`'s reason) unless the run folder `path` may be written."""
    problem = write_problem(path)
    if problem:
        raise RunError(problem)


def default_runs_dir() -> Path:
    return Path(os.environ.get("BRNN_RUNS_DIR", "runs"))


def validate_run_id(run_id: str) -> str:
    """Run ids come from URLs and forms: only letters, digits, '.', '_' and '-'."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id) or ".." in run_id:
        raise RunError(f"{run_id!r} is not a valid run id (letters, digits, '.', '_', '-' only)")
    return run_id


def new_run_id(dataset: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{dataset}-{secrets.token_hex(2)}"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime()) + f".{int(time.time() * 1000) % 1000:03d}"


class Run:
    """Reads and writes one run directory."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.id = self.path.name

    # paths
    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def gradient_flow_path(self) -> Path:
        return self.path / GRADIENT_FLOW_FILE

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def control_path(self) -> Path:
        return self.path / "control.jsonl"

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def last_ckpt(self) -> Path:
        return self.checkpoint_dir / "last.pt"

    @property
    def best_ckpt(self) -> Path:
        return self.checkpoint_dir / "best.pt"

    def exists(self) -> bool:
        return self.config_path.is_file()

    def linked_to(self) -> Path | None:
        """Where the run really is when its folder is a link to a run elsewhere (read-only here)."""
        return linked_to(self.path)

    # writing (each refuses a run folder that leads out of its runs folder: `write_problem`)
    def write_status(self, *, derive: Callable[[RunStatus], dict] | None = None, last_resort: bool = False,
                     **fields: Any) -> dict:
        """Change documented fields of status.json (runs.status.update_status, under the run's status lock; `derive`
        computes more from the status as it is then); only the training session and runs.lifecycle (what no worker
        is there to say) call it."""
        check_writable(self.path)
        return update_status(self.status_path, derive=derive, last_resort=last_resort, **fields)

    def log_metric(self, *, step: int, epoch: float, split: str, loss: float, accuracy: float | None = None,
                   lr: float | None = None, samples_per_s: float | None = None, elapsed_s: float = 0.0) -> None:
        check_writable(self.path)
        values = [step, round(epoch, 4), split, loss, accuracy, lr, samples_per_s, round(elapsed_s, 3)]
        append_line(self.metrics_path, ",".join("" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))
                                                for v in values))

    def log_test_row(self, *, step: int, epoch: float, loss: float, accuracy: float, elapsed_s: float) -> None:
        """The test row of a run that finished at `step`: exactly one. A worker killed after writing it (while it
        wrote the report) tests again when resumed, at the same step, so an earlier test row at that step goes
        first (metrics.csv rewritten whole, atomically: the worker that finishes is its only writer)."""
        check_writable(self.path)
        lines, _ = read_complete_lines(self.metrics_path)
        split_at = METRIC_COLUMNS.index("split")
        kept = [line for line in lines
                if not (line.split(",")[split_at:split_at + 1] == ["test"] and line.split(",")[0] == str(step))]
        if len(kept) < len(lines):
            blob = "".join(line + "\n" for line in kept).encode("utf-8", "surrogateescape")
            atomic_write(self.metrics_path, lambda fh: fh.write(blob))
        self.log_metric(step=step, epoch=epoch, split="test", loss=loss, accuracy=accuracy, elapsed_s=elapsed_s)

    def log_event(self, kind: str, message: str, *, step: int | None = None, **extra: Any) -> None:
        check_writable(self.path)
        record = {"time": now_iso(), "step": step, "kind": kind, "message": message, **extra}
        append_line(self.events_path, json.dumps(record, default=str))

    def send_command(self, cmd: str, **args: Any) -> str:
        """Queue a command (pause, resume, stop, or set with field and value) for the worker; returns its id.

        The format and what answers it: runs.protocol; the worker applies it in training.session."""
        check_writable(self.path)
        cid, line = command_line(cmd, now_iso(), **args)
        append_line(self.control_path, line)
        return cid

    # reading
    def config(self) -> dict:
        """config.json. A damaged one reads as what is left of it: {} for a file that is not a JSON object, and
        without a section that is not an object (`"train": null`), so one bad run never breaks a listing; one that
        cannot be read reads as {} too (the worker refuses to train a run without its settings)."""
        return readable_config(_or_empty(lambda: read_json(self.config_path, {}), {}))

    def read_status(self) -> RunStatus:
        """status.json, typed (a damaged file reads as a damaged status, never raises)."""
        return RunStatus.read(self.status_path)

    def stored_status(self) -> dict:
        """status.json as the worker last wrote it."""
        return self.read_status().to_dict()

    def status(self) -> dict:
        """status.json with the effective state: an active run whose worker is gone is `interrupted`."""
        return effective_status(self.stored_status())

    def metrics(self) -> pd.DataFrame:
        """metrics.csv as a DataFrame; one that cannot be read has no rows (the listing says why)."""
        lines, _ = _or_empty(lambda: read_complete_lines(self.metrics_path), ([], 0))
        rows = [line.split(",") for line in lines[1:] if line.count(",") == len(METRIC_COLUMNS) - 1]
        df = pd.DataFrame(rows, columns=METRIC_COLUMNS)
        for col in METRIC_COLUMNS:
            if col != "split":
                df[col] = pd.to_numeric(df[col], errors="coerce")
        return df

    def events(self) -> list[dict]:
        lines, _ = _or_empty(lambda: read_complete_lines(self.events_path), ([], 0))
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):  # a line of another shape is damage, skipped like a torn one
                out.append(event)
        return out


def _or_empty(read, empty):
    """read() for a reader that shows a run, or `empty` when the file cannot be read (permissions, I/O): one
    unreadable file must not break a page. Writers read strictly (fileio), so they never overwrite what they could
    not read."""
    try:
        return read()
    except OSError:
        return empty


def create_run(runs_dir: Path, config: dict, *, run_id: str | None = None,
               files: dict[str, Path] | None = None) -> Run:
    """Make a complete run directory in one rename: nobody ever sees a half-created run.

    `files` maps paths inside the run (e.g. checkpoints/parent.pt) to files linked or copied in
    before the rename (a branch's starting checkpoint)."""
    run_id = validate_run_id(run_id or new_run_id(str(config.get("dataset", "run"))))

    def fill(run: Run) -> None:
        run.checkpoint_dir.mkdir()
        atomic_write_json(run.config_path, config)
        append_line(run.metrics_path, ",".join(METRIC_COLUMNS))
        for name, source in (files or {}).items():
            # a hard link to a file outside the runs folder would make one file both here and there: copy it
            (link_or_copy if inside(source, runs_dir) else shutil.copyfile)(Path(source), run.path / name)

    return create_folder(runs_dir, run_id, fill)


def create_folder(parent: Path, name: str, fill: Callable[[Run], None]) -> Run:
    """A run directory, or a job folder (runs.job_queue) that has a run's status and channels, made whole in one
    rename: status.json `queued`, empty events.jsonl and control.jsonl, and what `fill` adds."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / name
    if final.exists():
        raise RunError(f"{final.name} already exists in {parent}")
    staging = parent / f".creating-{name}-{secrets.token_hex(3)}"
    staging.mkdir()
    try:
        run = Run(staging)
        new_status(run.status_path, state=State.QUEUED, step=0, epoch=0, message="queued", created=time.time(),
                   pid=None)
        run.events_path.touch()
        run.control_path.touch()
        fill(run)
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Run(final)


def resolve_run(runs_dir: Path, ref: str | Path) -> Run:
    """A run from its id (inside runs_dir) or its directory path."""
    path = Path(ref)
    if path.is_dir() and (path / "config.json").is_file():
        return Run(path)
    run = Run(Path(runs_dir) / validate_run_id(str(ref)))
    if not run.exists():
        raise RunError(f"no run {ref!r} in {Path(runs_dir).resolve()}")
    return run


def list_runs(runs_dir: Path) -> list[Run]:
    """Every complete run directory, newest first."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    runs = [Run(p) for p in runs_dir.iterdir()
            if p.is_dir() and not p.name.startswith(".") and (p / "config.json").is_file()]
    return sorted(runs, key=lambda r: r.id, reverse=True)


def delete_run(runs_dir: Path, run_id: str) -> None:
    """Remove a finished run; an active run must be stopped first."""
    run = resolve_run(runs_dir, validate_run_id(run_id))
    check_writable(run.path)
    if run.status().get("state") in ACTIVE_STATES:
        raise RunError(f"run {run_id} is still {run.status()['state']}; stop it before deleting")
    trash = run.path.with_name(f".deleting-{run.id}-{secrets.token_hex(3)}")
    os.rename(run.path, trash)  # vanish from listings at once, then remove
    shutil.rmtree(trash, ignore_errors=True)


def new_run_config(cfg: TrainConfig, data_dir: Path | None) -> dict:
    return {"train": cfg.to_dict(), "dataset": cfg.dataset,
            "data_dir": str(Path(data_dir).resolve()) if data_dir else None,
            "versions": {"brnn_core": __version__, "torch": _version("torch"), "python": sys.version.split()[0]},
            "created": time.time()}


def _version(package: str) -> str | None:
    """An installed package's version without importing it (the pages create runs; torch takes seconds)."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None
