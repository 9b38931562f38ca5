#!/usr/bin/env bash
# embedding.sh - the embedding engine's step (`tpurt bench --embedding`: a 1M x 64
# float32 table, Adagrad, 8 replicas x 1024 Zipf ids a step) in one process and as 2
# tasks of 4 cores over shm, alternated ROUNDS times in one run; the medians of
# lookups/s, updates/s, GB/s moved and its share of the memcpy bandwidth each run
# measured, and the tasks' steps/s against one process's.
#
# usage: bench/embedding.sh        environment: BUILD=build, ROUNDS=5, STEPS (default:
#   the bench's, ~2 s in one process, 200 steps across tasks), TRANSPORT=shm
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-5}
TRANSPORT=${TRANSPORT:-shm}
TPURT=$BUILD/bin/tpurt
steps=()
[ -n "${STEPS:-}" ] && steps=(-n "$STEPS")
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
run() { # run NAME ARGS...: one bench, its csv row as "NAME values"
  local name=$1 out
  shift
  out=$("$TPURT" bench --embedding "${steps[@]}" "$@") ||
    { echo "embedding.sh: bench --embedding $* failed: $out" >&2; exit 1; }
  out=$(sed -n 's/^\(\[0\] \)\{0,1\}csv:\([0-9]\)/\2/p' <<<"$out")
  [ -n "$out" ] || { echo "embedding.sh: bench --embedding $* printed no result" >&2; exit 1; }
  echo "$name ${out//,/ }" >>"$rows"
}
for ((round = 1; round <= ROUNDS; round++)); do
  if ((round % 2)); then
    run process; run tasks --tasks 2 --cores-per-task 4 --transport "$TRANSPORT"
  else
    run tasks --tasks 2 --cores-per-task 4 --transport "$TRANSPORT"; run process
  fi
done
# median NAME COLUMN: the median over the rounds (columns: steps/s lookups/s updates/s
# GB/s memcpy-GB/s %-of-memcpy, from 2).
median() {
  awk -v n="$1" -v c="$2" '$1 == n {print $c}' "$rows" | sort -g |
    awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf(m >= 1000 ? "%.0f" : "%.4g", m)}'
}
echo "$("$TPURT" --version), $(nproc) CPUs, $ROUNDS alternated rounds; medians"
echo
echo "| run | steps/s | lookups/s | updates/s | GB/s moved | memcpy GB/s | % of memcpy |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for name in process tasks; do
  label="1 process, 8 cores"
  [ "$name" = tasks ] && label="2 tasks ($TRANSPORT) x 4 cores"
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$(median "$name" 2)" \
    "$(median "$name" 3)" "$(median "$name" 4)" "$(median "$name" 5)" "$(median "$name" 6)" \
    "$(median "$name" 7)"
done
echo
awk -v a="$(median tasks 2)" -v b="$(median process 2)" \
  'BEGIN {printf "2 tasks / 1 process (steps/s): %.1f%% (target >= 50%%)\n", 100 * a / b}'
awk -v p="$(median process 7)" \
  'BEGIN {printf "1 process: %.1f%% of memcpy (target >= 50%%)\n", p}'
