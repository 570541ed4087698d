"""Before a trial trains on a cluster: every node that can take one must see the runs and data folders.

A trial writes its run directory where it runs, so on nodes that do not share the runs folder a sweep would
report success with nothing to show here. Once Ray is joined, `check_cluster` writes a marker into both folders
and runs one small task on each node with CPUs that looks for both and compares the brnn_core it imports with
the driver's; any failure stops the sweep before a trial. A node that joins later is caught by the trial itself
(`require_shared`), with the same advice.
"""

from __future__ import annotations

import hashlib
import secrets
import socket
from pathlib import Path

from brnn_core.sweep.space import SweepError

MARKER = ".brnn-cluster-check"
PROBE_TIMEOUT_S = 120.0
FIX = ("put the runs folder and the data folder on storage every machine mounts at the same path (NFS, for "
       "example: the same `--runs-dir` and `--data-dir` on every node, and the same checkout of this project), "
       "or drop --address to run the sweep on this machine alone")


def code_digest() -> str:
    """A fingerprint of the brnn_core sources this process imports: equal on two nodes, the same code runs."""
    import brnn_core

    root = Path(brnn_core.__file__).resolve().parent
    h = hashlib.sha1()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def probe(runs_marker: str, data_marker: str, token: str) -> dict:
    """Runs on one node: what it sees of the driver's folders and which brnn_core it imports."""
    import ray

    found = {}
    for name, marker in (("runs", runs_marker), ("data", data_marker)):
        try:
            found[name] = Path(marker).read_text().strip() == token
        except OSError:
            found[name] = False
    return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), **found,
            "code": code_digest()}


def check_cluster(ray, runs_dir: Path, data_dir: Path) -> list[dict]:
    """Check every live node with CPUs; raises SweepError naming the nodes, the folders and the fix."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # ray: only once joined

    token = secrets.token_hex(8)
    markers = {"runs": Path(runs_dir).resolve() / f"{MARKER}-{token}",
               "data": Path(data_dir).resolve() / f"{MARKER}-{token}"}
    for marker in markers.values():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(token)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive") and float(n.get("Resources", {}).get("CPU", 0)) > 0]
        task = ray.remote(num_cpus=0, max_retries=0)(probe)
        refs = {n["NodeID"]: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(str(markers["runs"]), str(markers["data"]), token) for n in nodes}
        results = [_answer(ray, n, refs[n["NodeID"]]) for n in nodes]
    finally:
        for marker in markers.values():
            marker.unlink(missing_ok=True)
    if not nodes:
        raise SweepError("the cluster has no node with CPUs to train on; start one with "
                         "`ray start --address=HEAD:PORT`")
    _refuse(results, {"runs": markers["runs"].parent, "data": markers["data"].parent})
    return results


def _answer(ray, node: dict, ref) -> dict:
    where = {"node": node["NodeID"], "address": node.get("NodeManagerAddress"), "host": node.get("NodeManagerHostname")}
    try:
        return {**where, **ray.get(ref, timeout=PROBE_TIMEOUT_S)}
    except Exception as exc:  # noqa: BLE001 - a node that cannot even import brnn_core, or never answers
        return {**where, "runs": False, "data": False, "code": None, "error": f"{type(exc).__name__}: {exc}"[:300]}


def _refuse(results: list[dict], folders: dict[str, Path]) -> None:
    mine = code_digest()
    problems = []
    for r in results:
        said = []
        if r.get("error"):
            said.append(f"could not run the check ({r['error']})")
        else:
            said += [f"does not see the {name} folder {folders[name]}" for name in ("runs", "data") if not r[name]]
            if r.get("code") != mine:
                said.append("imports another version of brnn_core than this machine")
        if said:
            problems.append(f"node {r.get('host') or '?'} ({r.get('address')}, {r['node'][:8]}) " + " and ".join(said))
    if problems:
        raise SweepError("this cluster cannot run the sweep: " + "; ".join(problems) + f". Fix: {FIX}")


def require_shared(sweep_dir: Path) -> None:
    """In a trial, before it writes anything: the sweep's folder must be the driver's (shared storage)."""
    if not (Path(sweep_dir) / "sweep.json").is_file():
        raise SweepError(f"node {socket.gethostname()} does not see the sweep folder {sweep_dir}: its records would "
                         f"stay on that machine. Fix: {FIX}")
