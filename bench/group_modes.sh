#!/usr/bin/env bash
# group_modes.sh - a cross-partition all-reduce among the K cores of a replica against a
# cross-replica all-reduce among K replicas: same bytes, same participants per group,
# same number of groups at once. Both sides of each pair run alternated, ROUNDS times,
# in one run; the table gives the median time per call of each side and their ratio
# (the issue's target: cross-partition within 10% of cross-replica).
#
# usage: bench/group_modes.sh
# environment:
#   BUILD=build          where `make` put bin/tpurt
#   ROUNDS=5             alternated rounds (each side once per round)
#   SIZES="-b 8 -e 4M -f 64"   the sweep of every run (8 B, 16 B, 1 KiB, 64 KiB, 4 MiB)
#   OUT=$BUILD/group_modes/<timestamp>   where the CSVs and the table go
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-5}
read -r -a SIZES <<<"${SIZES:--b 8 -e 4M -f 64}"
OUT=${OUT:-$BUILD/group_modes/$(date +%Y%m%d-%H%M%S)}
TPURT=$BUILD/bin/tpurt
[[ -x $TPURT ]] || { echo "group_modes.sh: $TPURT not found; run make first" >&2; exit 1; }
mkdir -p "$OUT"

# Pairs: name | cross-partition side | cross-replica side (the common options follow).
PAIRS=(
  "1 process, 2 cores: 1 group of 2|-r 2 --cores-per-replica 2 --group-mode cross-partition|-r 2 --group-mode cross-replica"
  "1 process, 8 cores: 4 groups of 2|-r 8 --cores-per-replica 2 --group-mode cross-partition|-r 8 --cores-per-replica 4 --group-mode cross-replica"
  "2 tasks (shm) of 1 core: 1 group of 2 across the tasks|--tasks 2 --transport shm --cores-per-replica 2 --group-mode cross-partition|--tasks 2 --transport shm --group-mode cross-replica"
  "2 tasks (tcp) of 1 core: 1 group of 2 across the tasks|--tasks 2 --transport tcp --cores-per-replica 2 --group-mode cross-partition|--tasks 2 --transport tcp --group-mode cross-replica"
)

run_side() {  # run_side PAIR SIDE ROUND ARGS...: one sweep into its CSV (data rows only)
  local pair=$1 side=$2 round=$3
  shift 3
  # shellcheck disable=SC2068
  "$TPURT" bench -c all_reduce ${@} "${SIZES[@]}" --csv 2>>"$OUT/log" |
    sed 's/^\[0\] //' | grep -E '^[0-9]+,' | sed "s/^/$pair,$side,$round,/" >>"$OUT/rows.csv"
}

: >"$OUT/rows.csv"
for ((round = 1; round <= ROUNDS; round++)); do
  for ((p = 0; p < ${#PAIRS[@]}; p++)); do
    IFS='|' read -r _ a b <<<"${PAIRS[p]}"
    # Alternate which side goes first, so neither always runs on a warmer machine.
    if ((round % 2)); then
      run_side "$p" partition "$round" $a
      run_side "$p" replica "$round" $b
    else
      run_side "$p" replica "$round" $b
      run_side "$p" partition "$round" $a
    fi
  done
  echo "group_modes.sh: round $round of $ROUNDS done" >&2
done

{
  echo "$("$TPURT" --version), $(nproc) CPUs, ${ROUNDS} alternated rounds," \
    "all_reduce float32 sum; time = median over rounds of the mean time per call (us)"
  echo
  echo "| pair | size (B) | cross-partition (us) | cross-replica (us) | ratio |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  # rows.csv: pair,side,round,size,count,type,redop,time_us,...
  for ((p = 0; p < ${#PAIRS[@]}; p++)); do
    name=${PAIRS[p]%%|*}
    awk -F, -v p="$p" -v name="$name" '
      function median(list,   n, v, i, j, t) {
        n = split(list, v, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      }
      $1 == p { t[$2, $4] = t[$2, $4] " " $8; sizes[$4] = 1 }
      END {
        n = 0; for (s in sizes) list[++n] = s + 0
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (list[j] < list[i]) { x = list[i]; list[i] = list[j]; list[j] = x }
        for (i = 1; i <= n; i++) {
          s = list[i]; a = median(t["partition", s]); b = median(t["replica", s])
          printf "| %s | %d | %.2f | %.2f | %.3f |\n", name, s, a, b, a / b
        }
      }' "$OUT/rows.csv"
  done
} | tee "$OUT/table.md"
echo "group_modes.sh: rows in $OUT/rows.csv, table in $OUT/table.md" >&2
