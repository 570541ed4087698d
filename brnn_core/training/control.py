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
    """New lines of one control.jsonl from `offset` on; one stat per call while nothing was appended."""

    def __init__(self, path: Path, offset: int = 0):
        self.path = Path(path)
        self.offset = offset
        self.size = -1

    def read(self) -> list[Received]:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return []
        if size == self.size:  # cheap: called between steps
            return []
        self.size = size
        if size < self.offset:  # the file was cut or replaced: what is in it now was written after that
            self.offset = 0
        lines, _ = read_complete_lines(self.path, self.offset)
        received = []
        for line in lines:
            self.offset += len(line.encode("utf-8", "surrogateescape")) + 1
            try:
                received.append(Received(parse_command(line), None, self.offset))
            except MalformedCommand as exc:
                received.append(Received(None, str(exc), self.offset))
        return received
