"""The benchmark harness behind `python -m brnn_core bench` (what each row means: benchmarks/README.md).

Apart from the training code it measures; only the CLI imports it. It stays inside the package because the
installed `bench` command runs it. Modules: suite (options, the run), context (sizes, device, timing), rows
(statistics), sides and child (what is compared, each in its own process), bench_* (the rows), results (table
and files), machine (what a result was measured on), blog_baseline (a faithful copy of the blog's script).
"""

from brnn_core.benchmarks.suite import main

__all__ = ["main"]
