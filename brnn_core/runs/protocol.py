"""The control protocol between a sender (the Train page, the CLI, a sweep's scheduler) and a run's worker.

A command is one JSON line appended to the run's control.jsonl: `{"id", "cmd", "time", ...}` with `cmd` one of
COMMANDS (`set` carries `field` and `value`; `stop` may carry `source` and `reason`). The worker reads new
lines between steps, applies them in file order and answers each in events.jsonl with an event whose
`command` is the id: the kind in ACKS when it was applied, `warning` when it was refused. `outcomes` reads
those answers back for the sender; `show_value` is how both sides write a value ("lr 0.01 -> 0.001").
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from brnn_core.config import (
    LIVE_AUTO_EPOCHS,
    LIVE_FIELDS,
    OLDER_RUN_DEFAULTS,
    ConfigError,
    TrainConfig,
    asks_auto_epochs,
)

PAUSE, RESUME, STOP, SET = "pause", "resume", "stop", "set"
COMMANDS = (PAUSE, RESUME, STOP, SET)
ACKS = {SET: "set", PAUSE: "pause", RESUME: "resume", STOP: "stop"}  # command -> the event kind that applies it
REFUSED = "warning"  # the event kind of a refused (or unknown, or malformed) command
OUTCOMES = {"set": "applied", "pause": "done", "resume": "done", "stop": "done"}  # event kind -> what a page says
# Who asked for a `set` (the event's `source`): a person, a branch's changed settings, a PBT exploit.
SOURCES = ("user", "branch", "pbt")


@dataclass(frozen=True)
class Command:
    """One line of control.jsonl as the worker reads it."""

    cmd: str
    id: str | None = None
    field: str | None = None
    value: Any = None
    source: str | None = None  # a scheduler's stop ("asha", "budget"); None: a person
    reason: str | None = None


class MalformedCommand(ValueError):
    """A control.jsonl line that is not a JSON object."""


def command_line(cmd: str, time_iso: str, **args: Any) -> tuple[str, str]:
    """(id, JSON line) for one command; `Run.send_command` appends it to control.jsonl."""
    cid = uuid.uuid4().hex[:12]
    return cid, json.dumps({"id": cid, "cmd": cmd, "time": time_iso, **args})


def parse_command(line: str) -> Command:
    """The receiver's reading of one line; raises MalformedCommand for anything but a JSON object."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        raise MalformedCommand(f"ignored a malformed command line: {line[:80]!r}") from None
    if not isinstance(data, dict):
        raise MalformedCommand(f"ignored a malformed command line: {line[:80]!r}")
    return Command(cmd=data.get("cmd"), id=data.get("id"), field=data.get("field"), value=data.get("value"),
                   source=data.get("source"), reason=data.get("reason"))


def show_value(value: Any) -> str:
    """A live setting as the event log and the page show it: numbers compactly (0.001), names as they are."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:g}"
    return str(value)


def change_message(name: str, old: Any, new: Any, step: int, note: str = "") -> str:
    """The message of a `set` event: 'lr 0.01 -> 0.001 at step 812' and what it means for the schedule."""
    return f"{name} {show_value(old)} -> {show_value(new)} at step {step}{note}"


# ---------------------------------------------------------------- the sending side
@dataclass(frozen=True)
class Outcome:
    """What became of one sent command."""

    label: str  # what was sent, as the user reads it ("lr → 0.001", "Pause")
    result: str  # applied | done | refused | waiting
    message: str = ""  # the worker's event message ("lr 0.01 -> 0.001 at step 812")


def live_settings(run, status) -> dict:
    """The values a run trains with now: its live status, or its config before the worker reported any."""
    live = status.get("live") or {k: run.config().get("train", {}).get(k) for k in LIVE_FIELDS}
    return {**live, "augment": live.get("augment") or OLDER_RUN_DEFAULTS["augment"]}  # runs from before augmentation


def live_problems(run, wanted: dict) -> dict[str, str]:
    """field -> what is wrong with a wanted live value (None: left as it is), checked on the run's own config as the
    worker will check it, so that nothing it would refuse is sent (the Train page, the Python API's `set`)."""
    asked = {k: v for k, v in wanted.items() if v is not None}
    problems = {}
    try:
        TrainConfig.from_dict({**(run.config().get("train") or {}), **asked}, check_device=False)
    except ConfigError as exc:
        problems = {k: v for k, v in exc.errors.items() if k in LIVE_FIELDS}
    if "epochs" not in problems and asks_auto_epochs(asked.get("epochs")):
        problems["epochs"] = LIVE_AUTO_EPOCHS
    return problems


def send_live_changes(run, current: dict, wanted: dict) -> dict[str, str]:
    """Send one `set` per live field whose wanted value differs from the current one; {command id: label}."""
    sent = {}
    for name in LIVE_FIELDS:
        value = wanted.get(name)
        if value is not None and value != current.get(name):
            sent[run.send_command(SET, field=name, value=value)] = f"{name} → {show_value(value)}"
    return sent


def outcomes(events: list[dict], sent: dict[str, str]) -> list[Outcome]:
    """What became of each sent command ({id: label}), in the order sent."""
    acks = {e.get("command"): e for e in events if e.get("command")}
    found = []
    for cid, label in sent.items():
        event = acks.get(cid)
        if event is None:
            found.append(Outcome(label, "waiting"))
        else:
            found.append(Outcome(label, OUTCOMES.get(event.get("kind"), "refused"), event.get("message", "")))
    return found


def event_text(event: dict) -> str:
    """One event of events.jsonl for people: its kind, then its message, unless the message starts with the kind
    already ("finished: test accuracy ...", "stopped at step 9", "resumed from ...", "epoch 2: ..."): then once."""
    kind, message = str(event.get("kind") or ""), str(event.get("message") or "")
    first = message.split(maxsplit=1)[0].rstrip(":,") if message else ""
    return message if kind and first.startswith(kind) else f"{kind}: {message}"

