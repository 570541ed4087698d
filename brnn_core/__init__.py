"""brnn_core: train, evaluate and use a bidirectional LSTM on 28x28 images read row by row.

Pure Python + PyTorch, no Streamlit: the dashboard, the CLI and the tests all stand on it.

Subpackages, bottom to top (each one's docstring lists its modules):

    data        the datasets, batching, augmentation, canvas preprocessing, the user's saved drawings
    runs        the run directory, the runs index, the job registry, branches, progress text
    training    one run from start to end: the loop, the worker, warm starts, the control channel
    inference   using a checkpoint: predictions, a look inside the BiLSTM, uploads, drawing scores
    sweep       hyperparameter sweeps on Ray Tune, every trial an ordinary run
    benchmarks  `python -m brnn_core bench`

Modules at the root, shared by all of them:

    config      TrainConfig, validated in one place
    devices     which devices and precisions this machine offers, and the checks with messages
    model       the BiLSTM, and `mode()`, the one place train/eval mode is switched
    checkpoint  self-describing checkpoints, loaded without running pickled code
    schedule    learning-rate schedules as pure functions of the step
    fileio      crash-safe writes: whole files by rename, whole lines by one append
    states      the states a run (or a sweep) can be in
    charts      the dashboard's Plotly figures of runs
    cli         the command line, `python -m brnn_core ...` (the top: only __main__ imports it)
"""

__version__ = "0.1.0"
