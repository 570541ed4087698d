"""What a maintainer measures, in one home outside the installed package; run from the repository root:
`python -m benchmarks` (the suite, harness/), `python -m benchmarks.NAME` (a script that checks one target) and
`python -m benchmarks.experiments.NAME` (a study behind a decision record, each with `--smoke`). README.md says
how, what each measures, its target and the latest result; docs/decisions/ says why."""
