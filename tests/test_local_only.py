"""The dashboard server never reaches outside 127.0.0.0/8, also while it refuses a cross-origin websocket.

Each server runs in a network namespace of its own (only loopback exists: nothing could leave even if it
tried) with a Python audit hook that records every socket connect and name lookup. A plain `streamlit run`
shows what is being guarded against (it looks up its addresses on the internet to refuse an origin); the
dashboard as `make run` starts it (`python -m ui.serve`) must not. Needs root and unshare; skipped elsewhere.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO, worker_env

pytestmark = [pytest.mark.worker, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
                                 reason="needs root, unshare and ip for a network namespace of its own")]

# Runs inside the namespace: the server under an audit hook, one refused cross-origin websocket, one page load.
PROBE = textwrap.dedent("""
    import base64, json, os, socket, subprocess, sys, time, urllib.request
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    events, port = sys.argv[1], 8765
    urlopen = urllib.request.build_opener(urllib.request.ProxyHandler({})).open  # straight to loopback
    hook = (
        "import sys, json\\n"
        f"log = open({events!r}, 'a', buffering=1)\\n"
        "def hook(event, args):\\n"
        "    if event == 'socket.connect':\\n"
        "        log.write(json.dumps(['connect', repr(args[1])]) + '\\\\n')\\n"
        "    elif event == 'socket.bind':\\n"
        "        log.write(json.dumps(['bind', repr(args[1])]) + '\\\\n')\\n"
        "    elif event == 'socket.getaddrinfo':\\n"
        "        log.write(json.dumps(['lookup', str(args[0])]) + '\\\\n')\\n"
        "sys.addaudithook(hook)\\n"
        "import runpy\\n"
        "sys.argv = sys.argv[1:]\\n"
        "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\\n")
    module = sys.argv[2]
    args = ["run", "streamlit_app.py"] if module == "streamlit" else []
    server = subprocess.Popen([sys.executable, "-c", hook, module, *args, "--server.port", str(port),
                               "--server.address", "127.0.0.1", "--server.headless", "true",
                               "--browser.gatherUsageStats", "false"],
                              stdout=open(events + ".log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start")
                time.sleep(0.3)
        refused = []
        for _ in range(2):  # the lookup is retried while it fails: twice shows it is not a one-off
            with socket.create_connection(("127.0.0.1", port)) as s:
                key = base64.b64encode(os.urandom(16)).decode()
                s.sendall((f"GET /_stcore/stream HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nUpgrade: websocket\\r\\n"
                           f"Connection: Upgrade\\r\\nSec-WebSocket-Key: {key}\\r\\nSec-WebSocket-Version: 13\\r\\n"
                           "Origin: http://evil.example\\r\\n\\r\\n").encode())
                s.settimeout(30)
                refused.append(s.recv(200).decode(errors="replace").split("\\r\\n")[0])
        page = urlopen(f"http://127.0.0.1:{port}/", timeout=30).status
        print(json.dumps({"refused": refused, "page": page}))
    finally:
        server.terminate()
        server.wait(timeout=60)
""")


def probe(module: str, tmp_path) -> tuple[dict, list[tuple[str, str]]]:
    events = tmp_path / f"{module}-events.jsonl"
    done = subprocess.run(["unshare", "--net", "--", sys.executable, "-c", PROBE, str(events), module], cwd=REPO,
                          env={**worker_env(), "BRNN_RUNS_DIR": str(tmp_path / "runs"),
                               "BRNN_DATA_DIR": str(tmp_path / "data")},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    lines = events.read_text().splitlines() if events.exists() else []
    return answer, [tuple(json.loads(line)) for line in lines]


def outside(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The connects to an address outside 127.0.0.0/8 and the lookups of a name other than localhost."""
    found = []
    for kind, what in events:
        if kind == "bind":  # listening, not reaching out
            continue
        if kind == "lookup":
            if what not in ("localhost", "127.0.0.1", "None", ""):
                found.append((kind, what))
            continue
        host = what.strip("()'\"").split(",")[0].strip("'\" ")
        try:
            if not ipaddress.ip_address(host).is_loopback:
                found.append((kind, what))
        except ValueError:
            if not what.startswith(("'/", '"/')):  # a unix socket path is local
                found.append((kind, what))
    return found


def test_the_dashboard_refuses_a_foreign_origin_without_leaving_the_machine(tmp_path):
    answer, events = probe("ui.serve", tmp_path)
    assert all(" 101 " not in line for line in answer["refused"]), answer  # refused, not upgraded
    assert answer["page"] == 200
    assert any(kind == "bind" and "8765" in what for kind, what in events), events  # the hook is watching
    assert outside(events) == [], outside(events)


def test_a_plain_streamlit_run_looks_its_addresses_up_when_it_refuses_an_origin(tmp_path):
    """What the test above guards against, seen by the same probe (nothing leaves: the namespace has no route)."""
    answer, events = probe("streamlit", tmp_path)
    assert all(" 101 " not in line for line in answer["refused"]), answer
    assert outside(events), events
