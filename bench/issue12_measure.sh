#!/bin/sh
# Issue 12's numbers in one command, taken only on a quiet machine (1-min load average < 1.5; waits up to
# 2 hours for one). Writes bench/results/<date>_thread_policy.json and the suite's <date>_cpu.{csv,json}.
#   bench/issue12_measure.sh            # everything (about 40 minutes on an idle 2-core machine)
#   QUICK=1 bench/issue12_measure.sh    # the suite rows only
set -e
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if [ -z "$QUICK" ]; then
  bench/when_quiet.sh -t 1.5 -w 7200 "$PY" bench/thread_policy.py --rounds 3 --steps 60 \
    --settings 1,2,2-spin1k,2-passive --loads none,spinner,bursty,twin
fi
bench/when_quiet.sh -t 1.5 -w 7200 "$PY" -m brnn_core bench --only defaults,concurrent,dashboard,history
