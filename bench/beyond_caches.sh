#!/usr/bin/env bash
# beyond_caches.sh - one process beyond the caches (issue 21): an all-reduce of 8
# replicas on 256 MiB of float32 each, with shared results (the default) and private
# copies (--private), each against the ceiling of its mode that the same run's header
# gives (busbw_ceiling_shared_GBps, busbw_ceiling_GBps; the target is 80%). With
# BASE_LIB, a directory holding another build's libtpurt.so.1, the runs alternate
# between it (base) and this build (new), and the table gives both and new / base.
# Medians over ROUNDS; the load average beside each run.
#
# usage: bench/beyond_caches.sh
# environment:
#   BUILD=build           where `make` put bin/tpurt and lib/
#   ROUNDS=5              alternated rounds
#   BASE_LIB=             the baseline's library directory (none: this build alone)
#   ARGS="-r 8 -b 256M -e 256M"   the sweep of every run
#   OUT=$BUILD/beyond_caches/<timestamp>   where the runs and the table go
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-5}
BASE_LIB=${BASE_LIB:-}
read -r -a ARGS <<<"${ARGS:--r 8 -b 256M -e 256M}"
OUT=${OUT:-$BUILD/beyond_caches/$(date +%Y%m%d-%H%M%S)}
TPURT=$BUILD/bin/tpurt
[[ -x $TPURT ]] || { echo "beyond_caches.sh: $TPURT not found; run make first" >&2; exit 1; }
[[ -z $BASE_LIB || -e $BASE_LIB/libtpurt.so.1 ]] ||
  { echo "beyond_caches.sh: no libtpurt.so.1 in BASE_LIB=$BASE_LIB" >&2; exit 1; }
mkdir -p "$OUT"
SIDES=(new)
[[ -n $BASE_LIB ]] && SIDES=(base new)

# One run: side,mode,round,load,time_us,busbw,ceiling,wrong (the last row of the sweep).
run() {
  local side=$1 mode=$2 round=$3 flag=() lib=$ROOT/$BUILD/lib out load key
  [[ $mode == private ]] && flag=(--private)
  [[ $side == base ]] && lib=$BASE_LIB
  load=$(cut -d' ' -f1 /proc/loadavg)
  out=$(LD_LIBRARY_PATH=$lib "$TPURT" bench "${ARGS[@]}" "${flag[@]}" --csv 2>>"$OUT/log")
  key=busbw_ceiling_shared_GBps
  [[ $mode == private ]] && key=busbw_ceiling_GBps
  # A base without the shared ceiling in its header: computed from its memcpy B.
  awk -F, -v s="$side" -v m="$mode" -v r="$round" -v l="$load" -v k="$key" '
    /^# collective=/ { n = split($0, kv, "[,=]"); for (i = 1; i < n; i++) h[kv[i]] = kv[i + 1]
                       P = h["group_size"]; c = (k in h) ? h[k] : h["memcpy_GBps"] * 2 * (P - 1) / (P * (P + 1)) }
    /^[0-9]+,/ { row = $5 "," $7 "," c "," $8 }
    END { print s "," m "," r "," l "," row }' <<<"$out" >>"$OUT/runs.csv"
}

for ((round = 1; round <= ROUNDS; round++)); do
  for mode in shared private; do
    for side in "${SIDES[@]}"; do run "$side" "$mode" "$round"; done
  done
done

{
  echo "# beyond_caches.sh $(date -u +%Y-%m-%dT%H:%MZ): tpurt bench ${ARGS[*]}, $ROUNDS rounds alternated, medians"
  echo
  echo "| results | side | time (ms) | busbw (GB/s) | ceiling (GB/s) | % of ceiling | load | wrong |"
  echo "|---|---|---:|---:|---:|---:|---|---:|"
  for mode in shared private; do
    for side in "${SIDES[@]}"; do
      awk -F, -v s="$side" -v m="$mode" '
        function median(a, n,   i, j, t) {
          for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
          return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        $1 == s && $2 == m && $5 != "" { n++; t[n] = $5; b[n] = $6; c[n] = $7; p[n] = 100 * $6 / $7; w += $8
                                         lo = (n == 1 || $4 < lo) ? $4 : lo; hi = (n == 1 || $4 > hi) ? $4 : hi }
        END { if (n) printf "| %s | %s | %.1f | %.3f | %.3f | %.0f%% | %s-%s | %d |\n", m, s,
                median(t, n) / 1000, median(b, n), median(c, n), median(p, n), lo, hi, w }' "$OUT/runs.csv"
    done
  done
} | tee "$OUT/table.md"
