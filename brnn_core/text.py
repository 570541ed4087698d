"""Counted words, said one way everywhere (the CLI, the pages, events): `plural(1, "run")` is '1 run',
`plural(1000, "run")` '1,000 runs'."""

from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """`n` and `noun`, with `many` (default noun + 's') unless n is 1."""
    return f"{n:,} {noun if n == 1 else many or noun + 's'}"
