"""Hyperparameter sweeps on Ray Tune, where every trial is an ordinary run directory.

`space` and `plan` check everything before Ray starts; `records` is the sweep's folder (docs/run-directory.md,
"Sweep records"); `trial` the Tune trainable (one trial = one run, trained by the worker's `train_run_dir`);
`steering` the schedulers, stopper and callback acting through the runs' control channel; `tuning` and `runner`
the Tuner and the driver; `cluster` the shared-folder check; `disk` which trials keep last.pt; `cli` and
`launch` the two ways to start one; `charts` the Sweep page's figures. Only trial, steering, tuning, runner and
cluster (and space.to_tune) import ray, and only once a sweep runs.
"""
