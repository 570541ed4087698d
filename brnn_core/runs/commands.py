"""The sending side of the control channel: what a page needs to steer a run and show what came of it.

A command goes into control.jsonl with an id (`Run.send_command`); the worker applies it between steps
and logs an event carrying that id (`"command": id`). So a sender keeps the ids it sent and reads the
event log to learn what happened to each: applied, done, refused, or still waiting for the worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from brnn_core.config import LIVE_FIELDS
from brnn_core.runs.rundir import Run

ACK_KINDS = {"set": "applied", "pause": "done", "resume": "done", "stop": "done"}  # event kind -> outcome


@dataclass(frozen=True)
class Outcome:
    """What became of one sent command."""

    label: str  # what was sent, as the user reads it ("lr → 0.001", "Pause")
    result: str  # applied | done | refused | waiting
    message: str = ""  # the worker's event message ("lr 0.01 -> 0.001 at step 812")


def live_settings(run: Run, status: dict) -> dict:
    """The values a run trains with now: its live status, or its config before the worker reported any."""
    live = status.get("live") or {k: run.config().get("train", {}).get(k) for k in LIVE_FIELDS}
    return {**live, "augment": live.get("augment") or "off"}  # runs from before augmentation have none


def show_value(value) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def send_live_changes(run: Run, current: dict, wanted: dict) -> dict[str, str]:
    """Send one `set` per live field whose wanted value differs from the current one; {command id: label}."""
    sent = {}
    for name in LIVE_FIELDS:
        value = wanted.get(name)
        if value is not None and value != current.get(name):
            sent[run.send_command("set", field=name, value=value)] = f"{name} → {show_value(value)}"
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
            found.append(Outcome(label, ACK_KINDS.get(event.get("kind"), "refused"), event.get("message", "")))
    return found
