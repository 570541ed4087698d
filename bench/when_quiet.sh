#!/bin/sh
# Run a command once the 1-minute load average is below a threshold (default 1.5): timing numbers
# taken on a busy shared machine mean little. Usage: bench/when_quiet.sh [-t 1.5] [-w MAXWAIT_S] CMD...
threshold=1.5
maxwait=7200
while [ $# -gt 0 ]; do
  case "$1" in
    -t) threshold=$2; shift 2 ;;
    -w) maxwait=$2; shift 2 ;;
    *) break ;;
  esac
done
start=$(date +%s)
while :; do
  load=$(cut -d' ' -f1 /proc/loadavg)
  if awk -v l="$load" -v t="$threshold" 'BEGIN { exit !(l < t) }'; then
    echo "load average $load < $threshold at $(date +%T): running $*" >&2
    exec "$@"
  fi
  if [ $(( $(date +%s) - start )) -gt "$maxwait" ]; then
    echo "no quiet window (load < $threshold) within ${maxwait}s; last load $load" >&2
    exit 75
  fi
  sleep 20
done
