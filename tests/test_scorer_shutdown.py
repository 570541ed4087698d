"""The server's drawings scorer (ui.drawings.Scorer) at shutdown: a process that ends while it scores exits
cleanly (no C++ abort from a thread inside torch at teardown) and leaves only whole score files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO, save_rendered, worker_env

from brnn_core.data.drawings import MIN_FOR_ACCURACY

CHECKPOINTS = 40  # more than the scorer can finish before the process ends

# A page process in miniature: the scorer is handed every checkpoint, then the main thread ends (as the server's
# does after Ctrl-C or SIGTERM) while the scorer is busy.
SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from brnn_core.data.drawings import folder_signature
    from ui.drawings import Scorer
    data_dir, folder = Path(sys.argv[1]), Path(sys.argv[2])
    scorer = Scorer()
    signature = folder_signature(data_dir)
    for path in sorted(folder.glob("*.pt")):
        scorer.ask(path, data_dir, signature)
    while scorer.pending() == len(list(folder.glob("*.pt"))):
        time.sleep(0.01)  # the first score is being computed
    print("ending with", scorer.pending(), "pending", flush=True)
""")


@pytest.mark.worker
def test_a_process_that_ends_while_the_scorer_works_exits_cleanly(tmp_path, finished, sample):
    data_dir, folder = tmp_path / "data", tmp_path / "checkpoints"
    folder.mkdir()
    save_rendered(data_dir, sample, MIN_FOR_ACCURACY)
    for i in range(CHECKPOINTS):
        shutil.copy(finished.best_ckpt, folder / f"c{i:02d}.pt")
    for attempt in range(3):
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir), str(folder)], cwd=REPO, env=worker_env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (attempt, done.returncode, done.stderr[-2000:])
        assert "terminate called" not in done.stderr and "ending with" in done.stdout
        assert not list(folder.glob(".*.tmp")), sorted(p.name for p in folder.iterdir())
        scored = list(folder.glob("*.drawings.json"))
        assert len(scored) < CHECKPOINTS  # it did end before the queue was done
        for path in scored:
            assert json.loads(path.read_text())["key"], path  # whole files only
