"""Where `make test`'s CPU goes: each test's CPU, counted with every process it starts, summed by file.

    .venv/bin/python -m benchmarks.suite_cpu [--top 25] [--json FILE] [-- PYTEST ARGS]

The suite is CPU-bound on two cores (both busy from its first second to its last), so its time is its CPU over
two cores, and only less CPU makes it shorter. pytest's durations are wall time under that load, and its own
CPU counters see only the children it reaps: not Ray's processes, Chromium's or a server's workers. So each
pytest-xdist worker runs in a cgroup of its own (cgroup v1 `cpuacct` or v2), read before and after each test:
a test's CPU includes everything it started, wherever that was reparented. Needs root (to make cgroups).
Runs the suite as `make test` does (PYTEST ARGS default to the Makefile's `-n 4 --dist loadfile ...`), prints
the files by CPU, the costliest tests and what no test accounts for (collection, processes left behind).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOG_ENV, ROOT_ENV = "SUITE_CPU_LOG", "SUITE_CPU_CGROUP"  # set for the pytest this script starts, read by its workers
CGROUP_MOUNTS = (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def cgroup_parent() -> Path | None:
    """A cgroup hierarchy this process can make cgroups in and read CPU from: v1 cpuacct, else v2."""
    for mount in CGROUP_MOUNTS:
        readable = (mount / "cpuacct.usage").is_file() or (mount / "cgroup.controllers").is_file()
        if readable and os.access(mount, os.W_OK):
            return mount
    return None


def cpu_seconds(group: Path) -> float:
    """CPU used by every process that ever ran in `group` (v1 cpuacct.usage in ns, v2 cpu.stat usage_usec)."""
    if (group / "cpuacct.usage").is_file():
        return int((group / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def make_test_options() -> list[str]:
    """`make test`'s pytest options (PYTEST_PARALLEL in the Makefile)."""
    found = re.search(r"^PYTEST_PARALLEL \?= (.+)$", (REPO / "Makefile").read_text(), re.M)
    return found.group(1).split() if found else []


# ---------------------------------------------------------------------------------- the plugin, in each worker
# pytest loads this module with `-p benchmarks.suite_cpu`; its hooks do nothing unless this script started pytest.

_GROUP = pytest.StashKey[Path]()


def pytest_configure(config):
    if not os.environ.get(LOG_ENV):
        return
    group = Path(os.environ[ROOT_ENV]) / os.environ.get("PYTEST_XDIST_WORKER", "main")
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))  # the processes it starts from now on are counted here
    config.stash[_GROUP] = group


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    group = item.config.stash.get(_GROUP, None)
    if group is None:
        yield
        return
    wall, cpu = time.monotonic(), cpu_seconds(group)
    yield  # setup, call and teardown: a module fixture's cost goes to the first test that needs it
    record = {"test": item.nodeid, "file": item.nodeid.split("::")[0], "cpu_s": cpu_seconds(group) - cpu,
              "wall_s": time.monotonic() - wall}
    with open(os.environ[LOG_ENV], "a") as log:
        log.write(json.dumps(record) + "\n")


# ---------------------------------------------------------------------------------------------- the script

def report(records: list[dict], total_cpu: float, wall: float, top: int) -> dict:
    by_file: dict[str, dict] = defaultdict(lambda: {"tests": 0, "cpu_s": 0.0, "wall_s": 0.0})
    for r in records:
        row = by_file[r["file"]]
        row["tests"] += 1
        row["cpu_s"] += r["cpu_s"]
        row["wall_s"] += r["wall_s"]
    in_tests = sum(r["cpu_s"] for r in records)
    print(f"\n{len(records)} tests, {wall:.0f} s: {total_cpu:.0f} CPU-s in all ({total_cpu / wall:.2f} cores busy); "
          f"{in_tests:.0f} in tests, {total_cpu - in_tests:.0f} outside any (start-up, collection)\n")
    print(f"{'CPU-s':>8} {'share':>6} {'cum':>6} {'tests':>5} {'wall-s':>7}  file")
    cum = 0.0
    files = sorted(by_file.items(), key=lambda kv: -kv[1]["cpu_s"])
    for name, row in files[:top]:
        cum += row["cpu_s"]
        print(f"{row['cpu_s']:8.1f} {row['cpu_s'] / total_cpu:6.1%} {cum / total_cpu:6.1%} {row['tests']:5d} "
              f"{row['wall_s']:7.0f}  {name}")
    print(f"\nthe {top} tests that cost most:")
    for r in sorted(records, key=lambda r: -r["cpu_s"])[:top]:
        print(f"{r['cpu_s']:8.1f} CPU-s {r['wall_s']:6.0f} s  {r['test']}")
    return {"tests": len(records), "wall_s": wall, "cpu_s": total_cpu, "cpu_in_tests_s": in_tests,
            "files": dict(files), "records": records}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite_cpu", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Arguments after -- go to pytest instead of make test's parallel options.")
    parser.add_argument("--top", type=int, default=25, help="files and tests to list (default 25)")
    parser.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results" / "suite_cpu.json",
                        help="where to write every test's numbers (default benchmarks/results/suite_cpu.json)")
    args, rest = parser.parse_known_args(argv)
    pytest_args = rest[1:] if rest[:1] == ["--"] else rest
    parent = cgroup_parent()
    if parent is None:
        print("suite_cpu needs a cgroup hierarchy it can write (cgroup v1 cpuacct or v2 under /sys/fs/cgroup): run it "
              "as root, on Linux", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="brnn-suite-cpu-", dir=parent))
    with tempfile.TemporaryDirectory(prefix="brnn-suite-cpu-") as scratch:
        log = Path(scratch) / "tests.jsonl"  # each worker appends a line per test
        env = {**os.environ, LOG_ENV: str(log), ROOT_ENV: str(root)}
        start = time.monotonic()
        rc = subprocess.run([sys.executable, "-m", "pytest", "-p", "benchmarks.suite_cpu",
                             *(pytest_args or make_test_options())], cwd=REPO, env=env).returncode
        wall = time.monotonic() - start
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    groups = [g for g in root.iterdir() if g.is_dir()]
    result = report(records, sum(cpu_seconds(g) for g in groups), wall, args.top)
    left = {g.name: pids for g in groups if (pids := (g / "cgroup.procs").read_text().split())}
    if left:  # a test that leaves a process running: found here, since the suite itself would not notice
        print(f"\nstill running after pytest ended (process ids by worker): {left}")
    else:
        for g in groups:
            g.rmdir()
        root.rmdir()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({**result, "pytest_rc": rc, "left_running": left}, indent=1))
    print(f"\npytest exited {rc}; every test's numbers: {args.json}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
