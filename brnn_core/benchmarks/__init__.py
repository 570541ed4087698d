"""The benchmark harness behind `python -m brnn_core bench` (what each row means: bench/README.md).

It lives apart from the training code it measures; nothing in brnn_core imports it except the CLI.

  suite           the command line: options, which benchmarks run, the run as a whole
  context         the sizes (full or --quick), the device, datasets loaded once, device-synced timing
  rows            a result row and the statistics behind it (median, range, alternated rounds)
  sides           what is compared: brnn_core's engine and the blog script's loops
  child           each side in a fresh process of its own, driven over a pipe
  bench_training  train and amp rows       bench_worker   worker and memory rows
  bench_eval      eval rows                bench_predict  predict rows
  bench_scaling   scaling rows
  results         the printed table and the csv/json files
  machine         what machine a result was measured on (also used by the scripts in bench/)
  blog_baseline   a faithful copy of the blog post's script: the baseline
"""

from brnn_core.benchmarks.suite import main

__all__ = ["main"]
