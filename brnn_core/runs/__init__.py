"""The run directory, a user-facing format (docs/run-directory.md), and what keeps track of runs.

    rundir    one run's folder (`Run`): create, read, list, delete, send a command, effective status
    index     `RunIndex`: the runs table and checkpoint choices, re-read only when files change;
              `read_run` and `runs_table` read afresh for Python users
    jobs      the one job registry: start and resume training workers and sweep drivers, one at a time
    commands  the sending side of the control channel: live changes sent, and what came of each
    branch    a new run from another run's checkpoint: planning, checks, creating the directory
    progress  progress text, ETA and the lr plan, the same for the CLI and the Train page

No training happens here: the worker (`training`) writes the run directory and `jobs` starts it as a
subprocess, so this layer never imports torch's training code.
"""

from brnn_core.runs.index import RunData, read_run, runs_table
from brnn_core.runs.rundir import Run, list_runs

__all__ = ["Run", "RunData", "list_runs", "read_run", "runs_table"]
