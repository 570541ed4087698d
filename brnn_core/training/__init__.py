"""Training one run: the loop, and everything that runs alongside it in the worker process.

`worker` is the process's entry point; `session` the one owner of a run while it trains (live settings, position,
lr, every status write), with `splits`, `warmstart`, `recorder`, `control`, `drawing_mix` and `reports` as its
parts; `engine` the loop; `threads`, `allocator` and `loss_scaling` how it runs; `teach` the Teach it config.
Each module's one line: docs/architecture.md. It writes through `runs` and reads through `data`; nothing below
imports it.
"""
