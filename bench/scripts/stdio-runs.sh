#!/bin/bash
# Embedded stdio against the seed's server, RUNS times (default 5), each run once with every process
# on one CPU (`taskset -c 0`: the bench, our server and the seed's Python, which inherit it) and once
# free on every CPU, alternated. A sequential client and its server ping-pong: when the scheduler
# puts them on two vCPUs, every request and every answer pays a cross-CPU wake-up, which costs about
# as much as our whole status call, so an unpinned run measures where the two processes landed as
# much as the servers (BENCHMARKS.md, round 15). Prints each run's two ratios and their medians.
# With BASE_SERVER set, every run also measures that build right before this one, in each mode.
#
#   bench/scripts/stdio-runs.sh [RUNS]
#   BASE_SERVER=<another build's approval-server> bench/scripts/stdio-runs.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-5}
NOTES=$(mktemp -d); OUT=$(mktemp -d)
trap 'rm -rf "$NOTES" "$OUT"' EXIT
SIDES="this"; [ -n "${BASE_SERVER:-}" ] && SIDES="base this"
bin() { if [ "$1" = base ]; then echo "$BASE_SERVER"; else echo target/release/approval-server; fi; }
ratio() { # ratio FILE PAIR: the run's median ratio of the pair ("status" or "durable prepare")
  grep -E "^\| peers \| $2.*calls per second" "$1" | head -1 | awk -F'|' '{print $4}' | awk '{print $1}'
}
for i in $(seq 1 "$RUNS"); do
  line="run $i:"
  for mode in pinned free; do
    for side in $SIDES; do
      pin=""; [ "$mode" = pinned ] && pin="taskset -c 0"
      $pin target/release/approval-bench --notes-dir "$NOTES" --scenario peers \
        --server-bin "$(bin $side)" --out "$OUT/$mode.$side.$i" > /dev/null 2>&1
      line="$line $mode $side status $(ratio "$OUT/$mode.$side.$i" status)"
      line="$line prepare $(ratio "$OUT/$mode.$side.$i" "durable prepare");"
    done
  done
  echo "$line"
done
med() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for mode in pinned free; do
  for side in $SIDES; do
    for pair in status "durable prepare"; do
      vals=$(for i in $(seq 1 "$RUNS"); do ratio "$OUT/$mode.$side.$i" "$pair" | tr -d x; done)
      echo "$mode, $side, $pair: median $(echo "$vals" | med)x," \
        "min $(echo "$vals" | sort -g | head -1)x, max $(echo "$vals" | sort -g | tail -1)x"
    done
  done
done
