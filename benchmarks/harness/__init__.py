"""The benchmark suite behind `python -m benchmarks` (`make bench`; what each row means: benchmarks/README.md).

Apart from the training code it measures: brnn_core imports none of it, and `pip install .` leaves it out.
Modules: suite (options, the run), context (sizes, device, timing), rows (statistics), sides and child (what is
compared, each in its own process), bench_* (the rows), results (table and files), machine (what a result was
measured on), blog_baseline (a faithful copy of the blog's script). The scripts beside this package reuse them.
"""
