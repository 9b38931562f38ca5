#!/usr/bin/env bash
# 8-byte all-reduce latency while other processes compete for the CPUs: the
# replicas' waits must not turn a busy machine into milliseconds per call.
# usage: bench/contention.sh [REPLICAS] [BUSY_PROCESSES...]   (defaults: 2; 0 2 6)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
TPURT=${TPURT:-$root/build/bin/tpurt}
[ -x "$TPURT" ] || { echo "contention.sh: build first (make): no $TPURT" >&2; exit 2; }
replicas=${1:-2}
shift || true
loads=("$@")
[ ${#loads[@]} -gt 0 ] || loads=(0 2 6)
REPS=3

pids=()
stop_load() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; pids=(); }
trap stop_load EXIT

echo "# tpurt bench -r $replicas -b 8 -e 8 beside N busy processes; $REPS runs each, mean us per call"
printf '%6s  %10s  %s\n' busy median runs
for n in "${loads[@]}"; do
  runs=()
  for _ in $(seq "$REPS"); do
    for _ in $(seq "$n"); do timeout 60 sh -c 'while :; do :; done' & pids+=($!); done
    runs+=("$("$TPURT" bench --csv -r "$replicas" -b 8 -e 8 | awk -F, '!/^#/ && $1 == 8 { print $5 }')")
    stop_load
  done
  median=$(printf '%s\n' "${runs[@]}" | sort -g | sed -n "$(( (REPS + 1) / 2 ))p")
  printf '%6s  %10s  %s\n' "$n" "$median" "${runs[*]}"
done
