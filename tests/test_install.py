"""`pip install .` gives a brnn_core that works without the checkout: installed into a fresh venv from a copy of
the checkout, it trains from an empty folder with `brnn train`, its job registry starts a worker there, and it
holds no measurement code (benchmarks/ stays in the checkout).

The fresh venv reads the pinned dependencies from this interpreter's site-packages through a .pth file
(offline, seconds); its own site-packages, which holds only brnn_core, comes first on sys.path.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import REPO, worker_env

pytestmark = [pytest.mark.slow, pytest.mark.worker]

TINY = ["--set", "epochs=1", "--set", "hidden_size=8", "--set", "num_layers=1", "--set", "batch_size=500",
        "--set", "drawn_share=0", "--set", "dataset=mnist-sample", "--set", "device=cpu"]

# Started with `python -I` from the empty folder: the registry's worker must find brnn_core by itself.
START_WORKER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import brnn_core
    from brnn_core.config import TrainConfig
    from brnn_core.runs.jobs import JobRegistry

    cfg = TrainConfig(epochs=1, hidden_size=8, num_layers=1, batch_size=500, drawn_share=0,
                      dataset="mnist-sample", device="cpu")
    run = JobRegistry().start(Path("runs"), cfg)  # relative: the worker runs in this folder too
    deadline = time.monotonic() + 120
    while run.status().get("state") not in ("finished", "failed", "interrupted", "stopped"):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    print(json.dumps({"file": brnn_core.__file__, "state": run.status().get("state"),
                      "log": (run.path / "worker.log").read_text()[-2000:]}))
""")


# every file the installed distribution put down, from its RECORD
INSTALLED_FILES = textwrap.dedent("""
    import json
    from importlib.metadata import distribution
    print(json.dumps([str(f) for f in distribution("brnn-dashboard").files]))
""")


def _bin(venv: Path, name: str) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / name


def checkout_copy(dest: Path) -> Path:
    """The checkout's files as a clone of this working tree would have them (tracked and new, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():  # a tracked file deleted in the working tree is not part of it
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv holding only what `pip install .` installs from a copy of the checkout (so the checkout stays clean)."""
    pytest.importorskip("setuptools", minversion="68", reason="the build backend pyproject.toml names")
    tmp = tmp_path_factory.mktemp("install")
    src = checkout_copy(tmp / "src")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # what `pip install .` does, in two steps: the build needs this interpreter's setuptools (offline, no isolation)
    subprocess.run([*pip, "wheel", ".", "--no-deps", "--no-build-isolation", "-w", str(tmp / "wheels")], cwd=src,
                   check=True, capture_output=True, timeout=180)
    wheel = next((tmp / "wheels").glob("brnn_dashboard-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = _bin(venv, "python")
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=120)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "pinned-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


@pytest.fixture
def outside(tmp_path) -> tuple[Path, dict[str, str]]:
    """An empty folder outside the checkout, and an environment that names no checkout path."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = worker_env(BRNN_DATA_DIR=str(tmp_path / "data"))
    for key in ("PYTHONPATH", "BRNN_RUNS_DIR", "PYTHONHOME"):
        env.pop(key, None)
    return cwd, env


def test_brnn_trains_from_any_folder(installed, outside):
    cwd, env = outside
    help_ = subprocess.run([str(_bin(installed, "brnn")), "--help"], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=120)
    assert help_.returncode == 0 and "train" in help_.stdout, help_.stderr
    out = subprocess.run([str(_bin(installed, "brnn")), "train", *TINY, "--runs-dir", "runs"], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (run,) = [p for p in (cwd / "runs").iterdir() if (p / "status.json").is_file()]
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert (run / "checkpoints" / "best.pt").is_file()
    environment = json.loads((run / "environment.json").read_text())  # installed: no checkout, no commit
    assert "git" not in environment and environment["packages"]["brnn-dashboard"] == "0.1.0"


def test_the_installed_package_holds_no_measurement_code(installed, outside):
    cwd, env = outside
    record = subprocess.run([str(_bin(installed, "python")), "-I", "-c", INSTALLED_FILES], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=120)
    assert record.returncode == 0, record.stderr
    files = json.loads(record.stdout)
    modules = [f for f in files if f.endswith(".py")]
    assert modules and all(f.startswith("brnn_core/") for f in modules), modules
    assert not [f for f in files if "bench" in f.lower() or "blog_baseline" in f or "experiments" in f]
    imports = subprocess.run([str(_bin(installed, "python")), "-I", "-c", "import benchmarks"], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=120)
    assert imports.returncode != 0 and "No module named 'benchmarks'" in imports.stderr
    bench = subprocess.run([str(_bin(installed, "brnn")), "bench", "--quick"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=120)
    assert bench.returncode == 2 and "make bench" in bench.stderr and "python -m benchmarks" in bench.stderr


def test_the_installed_job_registry_starts_its_worker_in_the_callers_folder(installed, outside):
    cwd, env = outside
    out = subprocess.run([str(_bin(installed, "python")), "-I", "-c", START_WORKER], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert Path(result["file"]).is_relative_to(installed), result["file"]
    assert not (Path(result["file"]).parents[1] / "ui").exists(), "the dashboard's packages were installed"
    assert result["state"] == "finished", result["log"]


@pytest.mark.worker
def test_a_checkout_dashboard_started_from_another_folder_finds_brnn_core_in_its_workers(tmp_path, monkeypatch):
    """`streamlit run /path/to/streamlit_app.py` from elsewhere, brnn_core not installed: the worker it starts
    (in the caller's folder) imports the same checkout."""
    from helpers import tiny_config, wait_for_state

    from brnn_core.runs.jobs import JobRegistry

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    run = JobRegistry().start(Path("runs"), tiny_config(epochs=1), data_dir=None)  # TINY alone trains 1,000 epochs
    status = wait_for_state(run, ("finished", "failed", "interrupted"), timeout=300)
    assert status["state"] == "finished", (run.path / "worker.log").read_text()[-2000:]
