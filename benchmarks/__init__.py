"""What a maintainer reruns to check this project's targets: run each as `python -m benchmarks.NAME` from the
repository root; README.md says how, what it measures, its target and the latest result."""
