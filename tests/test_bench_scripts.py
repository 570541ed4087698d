"""The suite (`python -m benchmarks`), the scripts in benchmarks/ and the studies in benchmarks/experiments/ run as
modules from the repository root; every experiment has a --smoke flag; nothing reaches into sys.path, and
brnn_core imports none of them (nor the tests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from helpers import REPO

HELPERS = {"__init__", "browser", "cuda_checks_bench", "cuda_checks_entrypoints", "cuda_checks_training"}
# --help through each script's main in one process: the heavy imports (torch, streamlit) are paid once
HELP_ALL = """
import contextlib, importlib, io, json, sys
out = {}
for name in sys.argv[1:]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        importlib.import_module(name).main(["--help"])
    out[name] = buf.getvalue()
print(json.dumps(out))
"""


def scripts(folder: str) -> list[str]:
    package = folder.replace("/", ".")
    return sorted(f"{package}.{p.stem}" for p in (REPO / folder).glob("*.py") if p.stem not in HELPERS)


def tracked(pattern: str) -> list[str]:
    return subprocess.run(["git", "grep", "-l", "-E", pattern, "--", "*.py", "*.sh", "Makefile"], cwd=REPO,
                          capture_output=True, text=True).stdout.split()


@pytest.mark.slow
def test_every_script_answers_help_and_every_experiment_has_smoke():
    names = scripts("benchmarks") + scripts("benchmarks/experiments")
    assert "benchmarks.__main__" in names  # the suite
    proc = subprocess.run([sys.executable, "-c", HELP_ALL, *names], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    helps = json.loads(proc.stdout.splitlines()[-1])
    for name in names:
        assert helps[name].startswith("usage:"), (name, helps[name][:500])
        if name.startswith("benchmarks.experiments."):
            assert "--smoke" in helps[name], f"{name} has no --smoke flag"


def test_no_tracked_file_inserts_into_sys_path():
    assert tracked(r"sys\.path\.(insert|append)") == [], "import through pyproject's pythonpath or run with -m"


def test_brnn_core_imports_no_script_and_no_test():
    pattern = re.compile(r"^\s*(from|import)\s+(benchmarks|experiments|tests|helpers|conftest)\b", re.M)
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "brnn_core").rglob("*.py")
                 if pattern.search(p.read_text())]
    assert offenders == []
    runs_scripts = re.compile(r"""["'](bench|benchmarks|experiments|tests)/[\w/]+\.py["']""")
    assert [str(p.relative_to(REPO)) for p in (REPO / "brnn_core").rglob("*.py")
            if runs_scripts.search(p.read_text())] == []
