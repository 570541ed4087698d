"""The run directory, a user-facing format (docs/run-directory.md), and what keeps track of runs.

One run's folder (`rundir`) and its status.json (`status`), the control protocol (`protocol`, `commands`), the
runs table (`index`, kept on disk by `index_store`), the job registry (`jobs`), branches (`branch`), status
written when no worker can (`lifecycle`), progress text (`progress`), its TensorBoard files (`tensorboard_log`)
and two runs side by side (`compare`). No training happens here: `jobs` starts
the worker (`training`) as a subprocess, so this layer never imports torch's training code.
"""

from brnn_core.runs.index import RunData, read_run, runs_table
from brnn_core.runs.rundir import Run, list_runs

__all__ = ["Run", "RunData", "list_runs", "read_run", "runs_table"]
