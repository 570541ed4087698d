"""Hyperparameter sweeps on Ray Tune, where every trial is an ordinary run directory.

    space.py     --search KEY=SPEC, parsed and checked against TrainConfig (no Ray needed)
    plan.py      everything else checked before Ray starts: scheduler, resources, address
    records.py   RUNS/sweeps/<sweep_id>/ (sweep.json, control, events) and reading trials back
    disk.py      which trials keep last.pt
    trial.py     the Tune trainable: one trial = one run, trained by the worker's train_run_dir
    steering.py  Tune schedulers, stopper and callback that act through the runs' control channel
    tuning.py    the Tuner itself; runner.py: Ray's start and end, the driver loop, --resume
    cluster.py   on a cluster, checked before any trial: every node sees the runs and data folders
    cli.py       `python -m brnn_core sweep`; launch.py: the dashboard starting a sweep in the background
    charts.py    the Sweep page's figures: every trial's curve, parallel coordinates

Only trial, steering, tuning, runner and cluster (and space.to_tune) import ray, and only once a sweep runs.
"""
