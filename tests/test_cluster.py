"""Sweeps on a real Ray cluster started the way Ray's docs start one, all inside a network namespace.

Each test writes a shell script and runs it with `unshare --net --pid --mount-proc --fork`: a network
namespace of its own (only loopback, plus a veth pair for a "network" address that exists only inside it)
and a PID namespace, so every process the script starts ends with it. Inside, heads and nodes are
started with `ray start ... --block` in their own process groups and ended by those ids (never
`ray stop`, never by name). A second node under `unshare --mount --propagation private` with a tmpfs
over the runs folder stands in for a machine that does not share it. Needs root; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import REPO, free_port, write_sample_as_idx

from brnn_core.runs.rundir import Run

pytestmark = [pytest.mark.slow, pytest.mark.worker]

RAY = Path(sys.executable).with_name("ray")
SWEEP = ["--set", "hidden_size=8", "--set", "num_layers=1", "--set", "epochs=1", "--set", "batch_size=500"]


def namespaces_available() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to make network and PID namespaces (unshare)"
    probe = subprocess.run(["unshare", "--net", "--pid", "--mount-proc", "--fork", "true"], capture_output=True)
    return None if probe.returncode == 0 else f"unshare failed: {probe.stderr.decode().strip()}"


skip_reason = namespaces_available()
needs_namespaces = pytest.mark.skipif(skip_reason is not None, reason=skip_reason or "")

PRELUDE = """
set -u
cd {repo}
export RAY_TMPDIR={raytmp} RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 BRNN_PROGRESS=plain
# each raylet would start Python workers ahead for every driver that connects, beside the ones Tune starts for its
# trials; the sweeps here never use them (the embedded Ray of brnn_core.sweep.runner turns them off the same way)
export RAY_prestart_worker_first_driver=0
unset RAY_ADDRESS
export RAY_AUTH_MODE=token  # `ray start --head` turns token auth on: every node and client sends the token
[ -f ~/.ray/auth_token ] || {ray} get-auth-token --generate > /dev/null
ip link set lo up
groups=""
started() {{ for i in $(seq 1 240); do grep -q "Ray runtime started" "$1" && return 0; sleep 0.5; done; return 1; }}
finish() {{  # end every head and node by its process group: SIGTERM, then SIGKILL what is left
  for g in $groups; do kill -TERM -- -$g 2>/dev/null; done
  for i in $(seq 1 90); do alive=0; for g in $groups; do kill -0 -- -$g 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.5; done
  for g in $groups; do kill -KILL -- -$g 2>/dev/null; done
}}
trap finish EXIT
"""

HEAD = """
setsid {ray} start --head --block --port={port} --num-cpus={cpus} --include-dashboard=false > {out}/head.log 2>&1 &
groups="$groups $!"
started {out}/head.log || {{ echo "head did not start"; exit 90; }}
"""

NODE = """
setsid {wrap} {ray} start --block --address=127.0.0.1:{port} --num-cpus={cpus} > {out}/{log}.log 2>&1 &
groups="$groups $!"
started {out}/{log}.log || {{ echo "node did not start"; exit 91; }}
"""

def node(port: int, out: Path, *, wrap: str = "", cpus: int = 2, log: str = "node") -> str:
    """A second node joining the head at 127.0.0.1:port (`wrap`: a command it runs under, e.g. PRIVATE_RUNS)."""
    return NODE.format(wrap=wrap, ray=RAY, port=port, out=out, cpus=cpus, log=log)


PRIVATE_RUNS = "unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs {runs} && exec \"$0\" \"$@\"'"

DRIVER = """
{env} {py} -m brnn_core sweep --runs-dir {runs} --data-dir {data} {args} > {out}/{name}.log 2>&1
echo $? > {out}/{name}.rc
ps -eo pid,args | grep "brnn_core sweep" | grep -v grep > {out}/{name}.left || true
"""


def run_in_namespace(script: str, out: Path, *, veth: bool = False, timeout: float = 1200) -> None:
    """Run `script` in fresh network + PID namespaces, with a short Ray temp folder of its own (removed after)."""
    raytmp = tempfile.mkdtemp(prefix="brnnc-")  # socket paths must stay under ~107 bytes
    setup = ("ip link add v0 type veth peer name v1\nip addr add 10.99.0.1/24 dev v0\nip link set v0 up\n"
             "ip link set v1 up\nip route add default dev v0\n") if veth else ""
    path = out / "cluster.sh"
    path.write_text(PRELUDE.format(repo=REPO, raytmp=raytmp, ray=RAY) + setup + script)
    try:
        done = subprocess.run(["unshare", "--net", "--pid", "--mount-proc", "--fork", "bash", str(path)],
                              capture_output=True, timeout=timeout)
    finally:
        shutil.rmtree(raytmp, ignore_errors=True)  # every Ray process of the namespace ended with it
    (out / "script.out").write_bytes(done.stdout + done.stderr)


@pytest.fixture
def cluster(tmp_path):
    out = tmp_path
    runs, data = tmp_path / "runs", tmp_path / "data"
    runs.mkdir()
    write_sample_as_idx(data)  # not needed by mnist-sample, but a data folder the nodes must see
    return out, runs, data


def driver(name: str, runs: Path, data: Path, out: Path, args: list[str], env: str = "") -> str:
    return DRIVER.format(env=env, py=sys.executable, runs=runs, data=data, out=out, name=name,
                         args=" ".join([*SWEEP, *args]))


def result(out: Path, name: str) -> tuple[int, str, str]:
    rc = (out / f"{name}.rc").read_text().strip() if (out / f"{name}.rc").is_file() else "none"
    log = (out / f"{name}.log").read_text() if (out / f"{name}.log").is_file() else ""
    assert rc != "none", (out / "script.out").read_text()[-3000:]
    return int(rc), log, (out / f"{name}.left").read_text()


def only_sweep(runs: Path) -> dict:
    (folder,) = (runs / "sweeps").iterdir()
    return json.loads((folder / "sweep.json").read_text())


@pytest.fixture(scope="module")
def runs_folder_sweeps(tmp_path_factory):
    """Both runs-folder checks in one namespace, to start one head: the "shared" sweep runs with the shared node
    as the only one with CPUs; only after it ended does a node join that cannot see a second runs folder, and the
    "private" sweep over that folder must refuse the cluster. Both sweeps use the same data folder."""
    out = tmp_path_factory.mktemp("runs-folder")
    shared, private, data = out / "runs", out / "private-runs", out / "data"
    shared.mkdir()
    private.mkdir()
    write_sample_as_idx(data)  # not needed by mnist-sample, but a data folder the nodes must see
    port = free_port()
    args = ["--search", "lr=grid:0.01,0.003", "--address", f"127.0.0.1:{port}"]
    script = (HEAD.format(ray=RAY, port=port, cpus=0, out=out) + node(port, out)
              + driver("shared", shared, data, out, args)
              + node(port, out, wrap=PRIVATE_RUNS.format(runs=private), log="private-node")
              + driver("private", private, data, out, args))
    run_in_namespace(script, out)
    return out, shared, private, data


@needs_namespaces
def test_a_second_node_that_shares_the_runs_folder_trains_every_trial(runs_folder_sweeps):
    out, runs, _, _ = runs_folder_sweeps
    code, log, left = result(out, "shared")
    assert code == 0, log[-3000:]
    assert "cluster check: 1 node " in log and left == ""
    info = only_sweep(runs)
    (checked,) = info["nodes"]  # the head has no CPUs: the second node is the only one that can train
    trials = [json.loads((runs / rid / "status.json").read_text()) for rid in info["trials"]]
    assert len(trials) == 2 and all(t["state"] == "finished" for t in trials), trials
    assert {t["ray_node"] for t in trials} == {checked["node"]}  # every trial ran on the second node


@needs_namespaces
def test_a_node_that_does_not_see_the_runs_folder_stops_the_sweep_before_any_trial(runs_folder_sweeps):
    out, _, runs, data = runs_folder_sweeps
    code, log, left = result(out, "private")
    assert code == 2, log[-3000:]
    assert f"does not see the runs folder {runs}" in log and "NFS" in log and "drop --address" in log, log[-3000:]
    assert "Traceback" not in log
    # no run directory was created (the queue's own folders, .jobs and .devices, record the sweep's refused turn)
    assert not [p for p in runs.iterdir() if p.name != "sweeps" and not p.name.startswith(".")]
    assert not list(runs.glob(".brnn-cluster-check-*")) and not list(data.glob(".brnn-cluster-check-*"))
    assert left == ""  # the driver is gone, and nothing of it runs on


LATE_NODE = """
({py} -m brnn_core sweep --runs-dir {runs} --data-dir {data} {args} > {out}/late.log 2>&1; echo $? > {out}/late.rc) &
driver=$!
for i in $(seq 1 1200); do grep -qs ",val," {runs}/*-t00/metrics.csv && break; sleep 0.5; done
# Tune hands a trial's Ray worker to the waiting trial the moment that trial ends (reuse_actors): t00 is paused
# (the Train page's Pause) so that it holds the shared node's CPU until t01 went to the late node's own worker. Its
# epochs are more than it can train before a pause sent from a new process lands on a busy machine; Stop ends it.
send() {{ {py} -c "import sys; from brnn_core.runs.rundir import Run; Run(sys.argv[1]).send_command(sys.argv[2])" \
  {runs}/*-t00 "$1"; }}
send pause
{node}
for i in $(seq 1 480); do grep -qs "t01 failed" {out}/late.log && break; sleep 0.5; done
send stop
wait $driver
ps -eo pid,args | grep "brnn_core sweep" | grep -v grep > {out}/late.left || true
"""


@needs_namespaces
def test_a_node_that_joins_after_the_check_and_cannot_see_the_runs_folder_fails_its_trial(cluster):
    """The check passed with one shared 1-CPU node; the second trial waits for room, and a node without the
    runs folder joins: that trial ends `failed` with the advice, recorded on this machine, and writes nowhere. The
    first, paused meanwhile, is then stopped (last.pt kept) and the sweep ends."""
    out, runs, data = cluster
    port = free_port()
    args = " ".join([*SWEEP, "--set", "epochs=1000", "--search", "lr=grid:0.01,0.003", "--concurrency", "2",
                     "--address", f"127.0.0.1:{port}"])
    late = node(port, out, wrap=PRIVATE_RUNS.format(runs=runs), log="late-node")
    script = (HEAD.format(ray=RAY, port=port, cpus=0, out=out)
              + node(port, out, cpus=1)
              + LATE_NODE.format(py=sys.executable, runs=runs, data=data, args=args, out=out, node=late))
    run_in_namespace(script, out)
    code, log, left = result(out, "late")
    assert "cluster check: 1 node " in log, log[-3000:]
    info = only_sweep(runs)
    status = {rid: json.loads((runs / rid / "status.json").read_text()) for rid in info["trials"]}
    first_id, second_id = sorted(status)
    first, second = status[first_id], status[second_id]
    assert first["state"] == "stopped" and Run(runs / first_id).last_ckpt.is_file(), first
    assert second["state"] == "failed", second
    assert "does not see the sweep folder" in second["message"] and "NFS" in second["message"], second
    assert "ray_node" not in second  # it never trained: the driver wrote its record
    assert "t01 failed: node" in log and "Traceback" not in log, log[-3000:]
    assert code == 0 and left == "", log[-3000:]


@needs_namespaces
def test_a_head_registered_under_a_network_address_is_joined_every_way(cluster):
    """`ray start --head` as on a real machine (registered as 10.99.0.1): by its address, auto and RAY_ADDRESS.
    The env way is the one through 127.0.0.1: `--address 127.0.0.1:port` resolves to the same address, so it is
    not run on its own."""
    out, runs, data = cluster
    port = free_port()
    ways = {"network": (["--address", f"10.99.0.1:{port}"], ""), "auto": (["--address", "auto"], ""),
            "env": ([], f"RAY_ADDRESS=127.0.0.1:{port}")}
    script = HEAD.format(ray=RAY, port=port, cpus=2, out=out) + "".join(
        driver(name, runs / name, data, out, ["--search", "lr=grid:0.01", *args], env)
        for name, (args, env) in ways.items())
    run_in_namespace(script, out, veth=True)
    assert "10.99.0.1" in (out / "head.log").read_text()  # the head did register under the network address
    for name in ways:
        code, log, left = result(out, name)
        assert code == 0, f"{name}: {log[-3000:]}"
        info = only_sweep(runs / name)
        assert info["state"] == "finished" and info["address"] in (f"127.0.0.1:{port}", f"10.99.0.1:{port}"), info
        assert left == ""


LOST_HEAD = """
export RAY_gcs_rpc_server_reconnect_timeout_s=10  # a driver gives up on a lost head after 60 s by default
({py} -m brnn_core sweep --runs-dir {runs} --data-dir {data} {args} > {out}/lost.log 2>&1; echo $? > {out}/lost.rc) &
driver=$!
for i in $(seq 1 1200); do grep -qs ",val," {runs}/*/metrics.csv && break; sleep 0.5; done
first=${{groups# }}; first=${{first%% *}}  # the first head's process group
kill -KILL -- -$first  # the head machine is gone
wait $driver
setsid {ray} start --head --block --port={port} --num-cpus=2 --include-dashboard=false > {out}/head2.log 2>&1 &
groups="$groups $!"
started {out}/head2.log || {{ echo "head did not restart"; exit 92; }}
{py} -m brnn_core sweep --runs-dir {runs} --resume $(ls {runs}/sweeps) > {out}/resume.log 2>&1
echo $? > {out}/resume.rc
"""


@needs_namespaces
def test_a_lost_head_leaves_an_interrupted_sweep_that_resumes(cluster):
    out, runs, data = cluster
    port = free_port()
    args = " ".join([*SWEEP, "--set", "epochs=4", "--search", "lr=grid:0.01,0.003", "--address", f"127.0.0.1:{port}"])
    script = HEAD.format(ray=RAY, port=port, cpus=2, out=out) + LOST_HEAD.format(
        py=sys.executable, runs=runs, data=data, args=args, out=out, ray=RAY, port=port)
    run_in_namespace(script, out)
    lost = (out / "lost.log").read_text()
    # Ray may end the driver itself when its head is gone, before our message: the sweep reads `interrupted`
    # then (Sweep.info: a running sweep whose driver is gone), with the same advice, and resumes
    assert (out / "lost.rc").read_text().strip() != "0", lost[-3000:]
    resumed = (out / "resume.log").read_text()
    assert (out / "resume.rc").read_text().strip() == "0", resumed[-3000:]
    info = only_sweep(runs)
    assert info["state"] == "finished", info
    for rid in info["trials"]:
        status = json.loads((runs / rid / "status.json").read_text())
        metrics = (runs / rid / "metrics.csv").read_text().splitlines()
        val_epochs = [float(line.split(",")[1]) for line in metrics[1:] if line.split(",")[2] == "val"]
        assert status["state"] == "finished" and val_epochs == [1, 2, 3, 4], (rid, val_epochs)


def test_a_wrong_address_fails_in_seconds_with_the_message(brnn, tmp_path):
    port = free_port()  # nothing listens there
    done = brnn(["sweep", "--runs-dir", tmp_path / "runs", "--data-dir", tmp_path / "data", *SWEEP, "--search",
                 "lr=grid:0.01", "--address", f"127.0.0.1:{port}"], tmp_path / "runs", tmp_path / "data")
    assert done.returncode == 2
    assert f"--address 127.0.0.1:{port}: nothing answers there" in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_auto_without_a_head_on_this_machine_says_how_to_start_one(brnn, tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    done = brnn(["sweep", "--runs-dir", tmp_path / "runs", *SWEEP, "--search", "lr=grid:0.01", "--address", "auto"],
                tmp_path / "runs", tmp_path / "data")
    assert done.returncode == 2
    assert "--address auto: no Ray head was started on this machine" in done.stderr
    assert "ray start --head" in done.stderr
