"""Training from Python (a notebook, a script): `start` a run through the dashboard's own front door and steer it.

    import brnn_core
    run = brnn_core.start({"epochs": 2}, runs_dir="runs")   # queued like a click on Start training
    run.wait(until_step=30); run.set(lr=0.003)             # a live change, acknowledged by the worker
    run.wait(); run.metrics(); run.figure()

`start` is `runs.jobs.JobRegistry.start`: the run is checked by `new_runs`, waits in the one queue and trains in a
worker process of its own, exactly as a run the dashboard starts (so the dashboard shows it live, and it goes on
training if the kernel restarts: `brnn_core.run(run_id)` takes it up again). The handle keeps nothing but the run's
folder and the registry that started it: every answer is read from the run directory, and every control is a
command in its control.jsonl (runs.protocol), answered by the worker in events.jsonl. docs/notebook.md.
"""

from __future__ import annotations

import time
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brnn_core.config import LIVE_FIELDS, TrainConfig
from brnn_core.data.datasets import default_data_dir, default_dataset
from brnn_core.runs.jobs import JobRegistry
from brnn_core.runs.progress import Pace, progress_text
from brnn_core.runs.protocol import (
    PAUSE,
    RESUME,
    STOP,
    Outcome,
    live_problems,
    live_settings,
    outcomes,
    send_live_changes,
)
from brnn_core.runs.rundir import Run, RunError, default_runs_dir, resolve_run
from brnn_core.runs.status import RunStatus
from brnn_core.states import ACTIVE_STATES, ENDED_STATES, RESUMABLE_STATES, State

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

ANSWER_S = 60.0  # how long a control waits for the worker's answer by default (a starting worker loads data first)
POLL_S = 0.5


def start(config: TrainConfig | dict | None = None, *, runs_dir: str | Path | None = None,
          data_dir: str | Path | None = None, **fields: Any) -> RunHandle:
    """Start a run as the dashboard does and return its handle at once (it may wait in the queue first).

    `config`: a TrainConfig, a dict of its fields (loose values as in `--set`), or None for the defaults; `fields`
    go on top. The dataset defaults as on the command line: full MNIST when it is in `data_dir`, else the offline
    sample. A bad value raises ConfigError (a ValueError naming each field and what it takes) before any run exists;
    the same settings as a run still training raise DuplicateRun (change the seed)."""
    runs_dir = Path(runs_dir or default_runs_dir())
    data_dir = Path(data_dir or default_data_dir())
    registry = JobRegistry()
    run = registry.start(runs_dir, as_config(config, data_dir, fields), data_dir=data_dir)
    return RunHandle(run, registry=registry, data_dir=data_dir)


def train(config: TrainConfig | dict | None = None, *, runs_dir: str | Path | None = None,
          data_dir: str | Path | None = None, progress: bool = True, **fields: Any) -> RunHandle:
    """`start`, then `wait` until the run has ended; its handle (`.status()` says how it ended)."""
    handle = start(config, runs_dir=runs_dir, data_dir=data_dir, **fields)
    handle.wait(progress=progress)
    return handle


def run(ref: str | Path, *, runs_dir: str | Path | None = None) -> RunHandle:
    """The handle of an existing run: its id in `runs_dir` (default $BRNN_RUNS_DIR or ./runs) or its folder."""
    return RunHandle(resolve_run(Path(runs_dir or default_runs_dir()), ref))


def as_config(config: TrainConfig | dict | None, data_dir: Path, fields: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from what `start` was given, validated like the form and `--set` (ConfigError if not)."""
    if isinstance(config, TrainConfig):
        values = config.to_dict()
    elif config is None or isinstance(config, dict):
        values = dict(config or {})
    else:
        raise TypeError(f"config takes a TrainConfig, a dict of its fields or None, not {type(config).__name__}")
    values.update(fields)
    values.setdefault("dataset", default_dataset(data_dir))
    return TrainConfig.from_dict(values)


class RunHandle:
    """One run, seen and steered from Python: `status`, `metrics`, `set`, `pause`, `resume`, `stop`, `wait`,
    `figure`. Each call reads the run's folder afresh, so the answers grow while it trains."""

    def __init__(self, run: Run, *, registry: JobRegistry | None = None, data_dir: Path | None = None):
        self._run = run
        self._registry = registry  # the one that started its worker (None: opened by id; made for a resume)
        self._data_dir = data_dir

    @property
    def id(self) -> str:
        return self._run.id

    @property
    def path(self) -> Path:
        return self._run.path

    def __repr__(self) -> str:
        status = self.status()
        return f"<run {self.id}: {status.state}, step {status.step}, {status.get('message') or ''}>"

    # reading
    def status(self) -> RunStatus:
        """status.json, typed (`.state`, `.step`, or as a dict); a run whose worker is gone reads `interrupted`."""
        if self._registry is not None:
            self._registry.reap()  # a worker that has ended leaves no zombie behind
        return RunStatus(self._run.status())

    def metrics(self) -> pd.DataFrame:
        """metrics.csv as a DataFrame: step, epoch, split (train, val, test), loss, accuracy, lr, samples_per_s,
        elapsed_s; read again at each call, so it grows while the run trains."""
        return self._run.metrics()

    def events(self) -> list[dict]:
        """events.jsonl: the start, each epoch, every command applied or refused, warnings, the end."""
        return self._run.events()

    def figure(self, *, smoothing: float = 0.6, log_y: bool = False) -> go.Figure:
        """The Train page's training-loss chart (raw and smoothed) as a Plotly figure."""
        from brnn_core.charts import train_loss_figure

        return train_loss_figure(self.metrics(), smoothing=smoothing, log_y=log_y, revision=self.id)

    # steering: the Train page's live controls, through the same commands
    def set(self, *, timeout: float = ANSWER_S, **changes: Any) -> list[Outcome]:
        """Change live settings (lr, grad_clip, epochs, augment) of the training run, checked as the Train page
        checks them before anything is sent (ValueError naming the allowed values); returns the worker's answers
        ("lr 0.01 -> 0.003 at step 30"), waiting up to `timeout` s for them (0: not at all)."""
        self._check(changes)
        status = self._active("change its settings")
        return self._answers(send_live_changes(self._run, live_settings(self._run, status), changes), timeout)

    def pause(self, *, timeout: float = ANSWER_S) -> Outcome:
        """Pause between two steps (the worker keeps the model in memory); `resume` continues."""
        self._active("pause")
        return self._command(PAUSE, timeout)

    def resume(self, *, timeout: float = ANSWER_S, **changes: Any) -> Outcome:
        """Continue a paused run; or an ended one (stopped, interrupted, or finished with more `epochs=`) from its
        last.pt, queued again like the Train page's Resume, with the live `changes`."""
        self._check(changes)
        if self.status().state in ACTIVE_STATES:
            outcome = self._command(RESUME, timeout)
            if changes:
                self.set(timeout=timeout, **changes)
            return outcome
        registry = self._registry = self._registry or JobRegistry()
        data_dir = self._data_dir or self._run.config().get("data_dir")
        registry.resume(self._run, data_dir=Path(data_dir) if data_dir else None, live=changes)
        return Outcome("Resume", "done", f"queued to continue from its last checkpoint (step {self.status().step})")

    def stop(self, *, timeout: float = ANSWER_S) -> Outcome:
        """Stop: the worker saves last.pt and ends the run `stopped` (`resume` continues it); a run still waiting
        in the queue leaves it, never trained. `wait()` returns once it has ended."""
        self._active("stop")
        return self._command(STOP, timeout)

    def wait(self, *, progress: bool = True, timeout: float | None = None, until_step: int | None = None) -> RunStatus:
        """Block until the run has ended (or trained `until_step` steps), showing a progress bar (tqdm's: a widget
        in Jupyter with ipywidgets, a text line elsewhere); returns its status. After `timeout` s it raises
        TimeoutError, and an interrupted wait (Ctrl-C, Jupyter's stop) leaves the run training: `stop` ends it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = ProgressBar(self.id) if progress else None
        try:
            while True:
                status = self.status()
                if bar is not None:
                    bar.show(status, self._run)
                if status.state in ENDED_STATES or (until_step is not None and status.step >= until_step):
                    return status
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {self.id} is still {status.state} after {timeout:g} s; it goes on "
                                       "training (stop() ends it)")
                time.sleep(POLL_S)
        finally:
            if bar is not None:
                bar.close()

    # the protocol's sending side
    def _check(self, changes: dict[str, Any]) -> None:
        """ValueError naming what is wrong with live `changes` and what is allowed; nothing is sent then."""
        fixed = sorted(set(changes) - set(LIVE_FIELDS))
        if fixed:
            raise ValueError(f"{', '.join(fixed)} cannot change while a run trains; only {', '.join(LIVE_FIELDS)} "
                             "can (another setting needs a new run: brnn_core.start)")
        problems = live_problems(self._run, changes)
        if problems:
            said = "; ".join(f"{name}={changes[name]!r}: {why}" if name in changes else f"{name}: {why}"
                             for name, why in problems.items())  # (the latter: the run's own config is damaged)
            raise ValueError(f"not sent to run {self.id}: {said}")

    def _active(self, doing: str) -> RunStatus:
        status = self.status()
        if status.state not in ACTIVE_STATES:
            hint = "; resume() continues it from its last checkpoint" if status.state in RESUMABLE_STATES else ""
            raise RunError(f"run {self.id} has ended ({status.state}): nothing to {doing}{hint}")
        return status

    def _command(self, cmd: str, timeout: float) -> Outcome:
        return self._answers({self._run.send_command(cmd): cmd.capitalize()}, timeout)[0]

    def _answers(self, sent: dict[str, str], timeout: float) -> list[Outcome]:
        """What became of the `sent` commands ({id: label}) once each is answered, the run has ended or `timeout` s
        have passed ('waiting' then); a refusal raises ValueError with the worker's reason."""
        deadline = time.monotonic() + timeout
        while True:
            found = outcomes(self._run.events(), sent)
            waiting = [o for o in found if o.result == "waiting"]
            if not waiting or time.monotonic() > deadline or self.status().state in ENDED_STATES:
                break
            time.sleep(POLL_S / 5)
        refused = [o for o in found if o.result == "refused"]
        if refused:
            raise ValueError("; ".join(f"{o.label}: {o.message}" for o in refused))
        ended = self.status()
        if waiting and ended.state in ENDED_STATES:  # a stop sent to a queued run cancels it without an answer
            found = [Outcome(o.label, "done", ended.get("message") or ended.state)
                     if o.result == "waiting" and o.label == STOP.capitalize() else o for o in found]
        return found


class ProgressBar:
    """tqdm's bar over a run's steps, with the Train page's and the CLI's words after it (epoch, step, speed, ETA
    from the same `Pace`), or what the run is doing before its first step and how it ended."""

    def __init__(self, run_id: str):
        if find_spec("ipywidgets"):  # Jupyter's widget where it can be drawn; tqdm.auto picks the text bar elsewhere
            from tqdm.auto import tqdm
        else:  # tqdm.auto would warn in Jupyter without ipywidgets before it falls back to the text bar
            from tqdm.std import tqdm
        self.bar = tqdm(total=None, bar_format=run_id + " {percentage:3.0f}%|{bar:20}| {desc}", leave=True,
                        delay=1e-9)  # drawn first by `show`, with the run's words
        self.shown: tuple = ()

    def show(self, status: RunStatus, run: Run) -> None:
        """Redraw when the step or the words changed (a text bar in a log file is a line per redraw)."""
        total = status.get("total_steps") or 0
        if status.state in (State.RUNNING, State.PAUSED):
            train = run.metrics().query("split == 'train'")
            batch = (run.config().get("train") or {}).get("batch_size")
            text = progress_text(status, batch, Pace.from_points(train["step"], train["elapsed_s"]))
        else:
            text = status.get("message") or status.state
        if (status.step, total, text) == self.shown:
            return
        self.shown = (status.step, total, text)
        self.bar.total = total or None
        self.bar.n = min(status.step, total) if total else 0
        self.bar.set_description_str(text, refresh=True)

    def close(self) -> None:
        self.bar.close()
