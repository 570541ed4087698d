"""Studies whose answers are now defaults; each decision record in docs/decisions/ names the one that reproduces
it. Run each as `python -m benchmarks.experiments.NAME` from the repository root; `--smoke` is a tiny run of the
same code path."""
