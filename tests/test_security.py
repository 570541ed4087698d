"""Safe defaults. The server binds localhost with XSRF protection on; every torch.load is
weights_only=True; nothing builds a shell command; run ids and names from requests are validated.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest
from helpers import REPO, app_test, fake_finished_run, texts

from brnn_core.runs.rundir import RunError, delete_run, resolve_run, validate_run_id

# The user's folders at the repository root only (brnn_core/data and brnn_core/runs are code); caches anywhere.
SKIP_AT_ROOT = {".git", "data", "runs", "build"}  # build: what `pip install .` leaves
SKIP_ANYWHERE = {"node_modules", "__pycache__", ".ruff_cache", ".pytest_cache"}
# Where a file read from disk may have been replaced by someone else: the safe flag is written out in place.
APP_CODE = ("brnn_core", "ui", "pages", "streamlit_app.py")


def repo_python_files() -> list[Path]:
    out = []
    for path in REPO.rglob("*.py"):
        parts = path.relative_to(REPO).parts[:-1]
        if parts and (parts[0] in SKIP_AT_ROOT or parts[0].startswith(".venv")):
            continue
        if not set(parts) & SKIP_ANYWHERE:
            out.append(path)
    assert len(out) > 10, out
    return sorted(out)


def test_the_scan_reads_every_package_folder():
    scanned = {p.relative_to(REPO).as_posix() for p in repo_python_files()}
    for name in ("brnn_core/data/as_drawn.py", "brnn_core/runs/rundir.py", "brnn_core/cli.py", "tests/helpers.py"):
        assert name in scanned, f"{name} is outside the security scan: check SKIP_AT_ROOT/SKIP_ANYWHERE"


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def test_streamlit_config_binds_localhost_with_xsrf_on():
    cfg = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    server = cfg["server"]
    assert server["address"] == "127.0.0.1"
    assert server.get("enableXsrfProtection", True) is True
    assert server.get("enableCORS", True) is True
    assert server.get("headless") is True
    assert cfg.get("browser", {}).get("gatherUsageStats") is False


def unsafe_loads(tree: ast.AST, in_tests: bool, in_app: bool = False) -> list[str]:
    """Application code: weights_only=True, always. Tests may show that a payload is live with an
    explicit, visible weights_only=False (a control); a torch.load relying on the default fails anywhere.
    np.load never allows pickles; in application code it says allow_pickle=False where it reads."""
    found = []
    for call in _calls(tree):
        name = _dotted(call.func)
        if name in ("np.load", "numpy.load"):
            flag = next((k.value for k in call.keywords if k.arg == "allow_pickle"), None)
            value = flag.value if isinstance(flag, ast.Constant) else ("absent" if flag is None else "not a constant")
            if not (value is False or (value == "absent" and not in_app)):
                found.append(f"{call.lineno} {name} allow_pickle={value}")
        if name in ("torch.load", "load") and (name == "torch.load" or _imports_torch_load(tree)):
            flag = next((k.value for k in call.keywords if k.arg == "weights_only"), None)
            value = flag.value if isinstance(flag, ast.Constant) else "not a constant"
            if not (value is True or (in_tests and value is False)):
                found.append(f"{call.lineno} torch.load weights_only={value}")
        if name in ("pickle.load", "pickle.loads", "cPickle.load", "dill.load", "joblib.load") and not in_tests:
            found.append(f"{call.lineno} {name}")
    return found


def _imports_torch_load(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module == "torch" and any(a.name == "load" for a in n.names)
               for n in ast.walk(tree))


def shell_calls(tree: ast.AST, in_tests: bool, in_app: bool = False) -> list[str]:
    found = []
    for call in _calls(tree):
        name = _dotted(call.func)
        if name in ("os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput", "pty.spawn") \
                or name.startswith(("os.exec", "os.spawn")):
            found.append(f"{call.lineno} {name}")
        for kw in call.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append(f"{call.lineno} shell=...")
        if name in ("eval", "exec") and not in_tests:
            found.append(f"{call.lineno} {name}")
    return found


def _scan(check) -> list[str]:
    offenders = []
    for path in repo_python_files():
        rel = path.relative_to(REPO)
        tree = ast.parse(path.read_text(), str(path))
        offenders += [f"{rel}:{hit}" for hit in check(tree, "tests" in rel.parts, rel.parts[0] in APP_CODE)]
    return offenders


def test_every_torch_load_is_weights_only():
    offenders = _scan(unsafe_loads)
    assert not offenders, f"torch.load without weights_only=True, an np.load that may unpickle, or pickle: {offenders}"


def test_no_shell_commands_anywhere():
    assert not _scan(shell_calls), "a shell command (or eval/exec) in the code"


@pytest.mark.parametrize(("source", "in_tests", "hits"), [
    ("import torch\ntorch.load(p)", False, 1),
    ("import torch\ntorch.load(p, weights_only=False)", False, 1),
    ("import torch\ntorch.load(p, weights_only=False)", True, 0),
    ("import torch\ntorch.load(p, map_location='cpu')", True, 1),
    ("import torch\ntorch.load(p, weights_only=flag)", False, 1),
    ("import torch\ntorch.load(p, weights_only=True)", False, 0),
    ("from torch import load\nload(p)", False, 1),
    ("import pickle\npickle.loads(b)", False, 1),
    ("import numpy as np\nnp.load(p, allow_pickle=True)", True, 1),
    ("import numpy as np\nnp.load(p, allow_pickle=flag)", False, 1),
    ("import numpy as np\nnp.load(p)", False, 0),
])
def test_the_load_scanner_catches_unsafe_loads(source, in_tests, hits):
    assert len(unsafe_loads(ast.parse(source), in_tests)) == hits


@pytest.mark.parametrize(("source", "hits"), [
    ("import numpy as np\nnp.load(p)", 1), ("import numpy\nnumpy.load(p)", 1),
    ("import numpy as np\nnp.load(p, allow_pickle=False)", 0),
])
def test_application_code_says_allow_pickle_false(source, hits):
    assert len(unsafe_loads(ast.parse(source), False, in_app=True)) == hits


@pytest.mark.parametrize(("source", "hits"), [
    ("import os\nos.system('ls')", 1), ("import subprocess\nsubprocess.run('ls', shell=True)", 1),
    ("import subprocess\nsubprocess.Popen(cmd, shell=flag)", 1), ("import os\nos.popen('ls')", 1),
    ("import os\nos.execvp('ls', ['ls'])", 1), ("import subprocess\nsubprocess.run(['ls'])", 0),
    ("import subprocess\nsubprocess.run(['ls'], shell=False)", 0), ("eval(x)", 1),
])
def test_the_shell_scanner_catches_shell_commands(source, hits):
    assert len(shell_calls(ast.parse(source), False)) == hits


def test_the_worker_command_is_an_argument_list():
    from brnn_core.runs.jobs import worker_command

    cmd = worker_command(Path("/tmp/runs/x; rm -rf ~"), resume=True)
    assert isinstance(cmd, list) and cmd[1:3] == ["-m", "brnn_core.training.worker"]
    assert "/tmp/runs/x; rm -rf ~" in cmd  # one argument, never parsed by a shell


HOSTILE_IDS = ["../x", "../../etc", "/etc/passwd", "a/b", "a\\b", "", ".", "..", ".hidden", "-rf", "a..b",
               "x" * 200, "run id", "run\x00id", "run\nid", "$(id)", "`id`", "ab;rm", "é", "%2e%2e"]


@pytest.mark.parametrize("run_id", HOSTILE_IDS, ids=[repr(i[:20]) for i in HOSTILE_IDS])
def test_hostile_run_ids_are_refused(tmp_path, run_id):
    with pytest.raises(RunError):
        validate_run_id(run_id)
    with pytest.raises(RunError):
        delete_run(tmp_path, run_id)
    if not Path(run_id).is_dir():
        with pytest.raises(RunError):
            resolve_run(tmp_path, run_id)


def test_good_run_ids_pass():
    for run_id in ("20260101-120000-mnist-ab12", "a", "A.b_c-1"):
        assert validate_run_id(run_id) == run_id


@pytest.mark.parametrize("wanted", ["../../etc", "/etc", "..", "x/../../y", "%2e%2e%2f"])
def test_a_hostile_run_in_the_url_is_ignored(tmp_path, monkeypatch, wanted):
    runs_dir = tmp_path / "runs"
    run = fake_finished_run(runs_dir)
    at = app_test(monkeypatch, runs_dir)
    at.query_params["run"] = wanted
    at.run()
    assert not at.exception, texts(at.exception)
    assert any(run.id in m for m in texts(at.markdown)), "the page did not fall back to a real run"
    at.switch_page("pages/runs.py").run()
    assert not at.exception, texts(at.exception)
