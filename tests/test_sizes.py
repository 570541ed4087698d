"""Small modules with one job: no module over 500 lines and no function over 60 in brnn_core, ui and pages (the
team's rule; a longer one is split by what it does, not by line count)."""

from __future__ import annotations

import ast

from helpers import REPO

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def test_no_module_over_500_lines_and_no_function_over_60():
    too_long = []
    for folder in ("brnn_core", "ui", "pages"):
        for path in sorted((REPO / folder).rglob("*.py")):
            source = path.read_text()
            name = path.relative_to(REPO).as_posix()
            if len(source.splitlines()) > MAX_MODULE_LINES:
                too_long.append(f"{name}: {len(source.splitlines())} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = node.end_lineno - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)
