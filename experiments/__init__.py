"""One-off studies whose answers are now defaults; docs/decisions/ records what each one decided. Run each as
`python -m experiments.NAME` from the repository root; `--smoke` is a tiny run of the same code path."""
