#!/usr/bin/env bash
# mesh_demo.sh - the step time of `tpurt demo --mesh R,K` on 8 cores for 4,2, 2,4 and
# the data-parallel 8,1, alternated ROUNDS times in one run; the median per mesh and
# problem size (the demo prints the median step time of each run).
#
# usage: bench/mesh_demo.sh        environment: BUILD=build, ROUNDS=5,
#   PROBLEMS="--batch 64 --hidden 32|--batch 256 --hidden 256" (|-separated), STEPS=30
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-30}
IFS='|' read -r -a PROBLEMS <<<"${PROBLEMS:---batch 64 --hidden 32|--batch 256 --hidden 256}"
TPURT=$BUILD/bin/tpurt
MESHES=(4,2 2,4 8,1)
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for ((round = 1; round <= ROUNDS; round++)); do
  for ((p = 0; p < ${#PROBLEMS[@]}; p++)); do
    for ((i = 0; i < ${#MESHES[@]}; i++)); do
      m=${MESHES[(i + round) % ${#MESHES[@]}]}  # rotate the order every round
      # shellcheck disable=SC2086
      us=$("$TPURT" demo --mesh "$m" ${PROBLEMS[p]} --steps "$STEPS" |
        sed -n 's/^step time: median \([0-9.]*\) us.*/\1/p')
      [ -n "$us" ] || { echo "mesh_demo.sh: demo --mesh $m ${PROBLEMS[p]} failed" >&2; exit 1; }
      echo "$p $m $us" >>"$rows"
    done
  done
done
echo "$("$TPURT" --version), $(nproc) CPUs, 8 cores, $ROUNDS alternated rounds of $STEPS steps;" \
  "median step time (us)"
echo
printf '| problem |'; for m in "${MESHES[@]}"; do printf ' --mesh %s |' "$m"; done; echo
printf '| --- |'; for _ in "${MESHES[@]}"; do printf ' ---: |'; done; echo
for ((p = 0; p < ${#PROBLEMS[@]}; p++)); do
  printf '| %s |' "${PROBLEMS[p]}"
  for m in "${MESHES[@]}"; do
    awk -v p="$p" -v m="$m" '$1 == p && $2 == m {print $3}' "$rows" | sort -g |
      awk '{v[NR] = $1} END {printf " %.1f |", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
  done
  echo
done
