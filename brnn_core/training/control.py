"""The worker's reading end of the control channel (the format: runs.protocol).

`ControlReader.read()` returns the commands appended to control.jsonl since it last looked, in file order,
each with the byte offset after its line; the training session applies them and saves that offset in
status.json, so a later worker of the same run applies none twice and none sent while no worker ran is lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from brnn_core.fileio import read_complete_lines
from brnn_core.runs.protocol import Command, MalformedCommand, parse_command


@dataclass(frozen=True)
class Received:
    """One new line: its command, or why it was not one (`malformed`), and the offset after it."""

    command: Command | None
    malformed: str | None
    offset: int


class ControlReader:
    """New lines of one control.jsonl from `offset` on; one stat per call while nothing was appended. `offset` is
    the offset after the last line `read()` handed over: what the session saves, so a line looked at with `peek()`
    (the queue looks for a stop) is still handed over, and applied, once."""

    def __init__(self, path: Path, offset: int = 0):
        self.path = Path(path)
        self.offset = offset
        self._parsed = offset  # after the last line parsed; peek() may run ahead of read()
        self._pending: list[Received] = []
        self.size = -1

    def peek(self) -> list[Received]:
        """Every line not handed over yet, without handing it over (the next `read()` returns them first)."""
        self._pending += self._new()
        return list(self._pending)

    def read(self) -> list[Received]:
        received, self._pending = self._pending + self._new(), []
        if received:
            self.offset = received[-1].offset
        return received

    def _new(self) -> list[Received]:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return []
        if size == self.size:  # cheap: called between steps
            return []
        self.size = size
        if size < self._parsed:  # the file was cut or replaced: what is in it now was written after that
            self.offset = self._parsed = 0
            self._pending = []
        lines, _ = read_complete_lines(self.path, self._parsed)
        received = []
        for line in lines:
            self._parsed += len(line.encode("utf-8", "surrogateescape")) + 1
            try:
                received.append(Received(parse_command(line), None, self._parsed))
            except MalformedCommand as exc:
                received.append(Received(None, str(exc), self._parsed))
        return received
