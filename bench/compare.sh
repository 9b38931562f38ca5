#!/usr/bin/env bash
# compare.sh - tpurt's all-reduce next to Open MPI's shared-memory MPI_Allreduce
# (replicas in one process), and tpurt's tasks over TCP next to Open MPI over TCP and
# Gloo's ring (processes on loopback), measured in the same run on this machine, as
# two markdown tables.
#
# usage: bench/compare.sh [--quick]
#   --quick   the anchors' smoke run (n=2 only, sizes up to 1 MiB); the table then
#             compares bandwidth at 1 MiB instead of 16 MiB
# environment:
#   BUILD=build                     where `make` put bin/tpurt
#   ANCHORS=../shared/anchors       the anchor benchmarks (only read)
#   OUT=$BUILD/anchors/<timestamp>  where every CSV, log and the table go
#   RUNS=3                          runs of every contender (the anchors and tpurt's
#                                   sweeps); the tables take the median run per size
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
ANCHORS=${ANCHORS:-$ROOT/../shared/anchors}
OUT=${OUT:-$BUILD/anchors/$(date +%Y%m%d-%H%M%S)}
RUNS=${RUNS:-3}
TPURT=$BUILD/bin/tpurt
QUICK=()
BIG=16777216 MAXBYTES=64M
case "${1:-}" in
  "") ;;
  --quick) QUICK=(--quick); BIG=1048576 MAXBYTES=1M ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

[[ -x $TPURT ]] || { echo "compare.sh: $TPURT not found; run make first" >&2; exit 1; }
if [[ ! -f $ANCHORS/run_anchors.sh ]]; then
  echo "compare.sh: no anchor benchmarks at $ANCHORS (run_anchors.sh is missing)." >&2
  echo "  They live beside the repository, in ../shared/anchors; set ANCHORS=DIR to use" >&2
  echo "  another copy. Without them, tpurt alone: $TPURT bench -r 8 -b 8 -e 64M -f 2" >&2
  exit 1
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# The anchors build next to their script, and $ANCHORS is shared read-only: run a copy.
SRC=$OUT/anchors-src
rm -rf "$SRC"
cp -r "$ANCHORS" "$SRC"
chmod -R u+w "$SRC"
rm -rf "$SRC/build" "$SRC/results"
# run_anchors.sh's measure() returns 1 when its last try was disturbed (its final
# `((try < MAX_TRIES)) && log` is false), which set -e turns into an exit of the whole
# script. Make that line an `if`; the measuring itself is unchanged.
sed -i 's/^\( *\)((try < MAX_TRIES)) \&\& \(log .*\)$/\1if ((try < MAX_TRIES)); then \2; fi/' \
  "$SRC/run_anchors.sh"

# median_rows TIME_COLUMN OUT FILE...: OUT gets the first file's comments and header,
# and per size (column 1) the row whose time (TIME_COLUMN) is the median over the
# files (every column of that run, so its checks go with it). This machine's speed
# swings up to 3x between runs minutes apart, for every contender alike; the median of
# a few runs keeps one slow (or fast) run from deciding a ratio.
median_rows() {
  local col=$1 out=$2
  shift 2
  awk -F, -v col="$col" '/^#/ || $1 !~ /^[0-9]+$/ { if (FILENAME == ARGV[1]) print; next }
    { n[$1]++; row[$1, n[$1]] = $0; t[$1, n[$1]] = $col + 0; if (!($1 in seen)) { seen[$1] = 1; order[++sizes] = $1 } }
    END {
      for (k = 1; k <= sizes; k++) {
        s = order[k]; m = n[s]
        for (i = 1; i <= m; i++) idx[i] = i
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
          if (t[s, idx[j]] < t[s, idx[i]]) { x = idx[i]; idx[i] = idx[j]; idx[j] = x }
        print row[s, idx[int((m + 1) / 2)]]
      }
    }' "$@" >"$out"
}
# median_sweep OUT RUN...: RUNS runs of tpurt's sweep RUN..., and their median in OUT.
median_sweep() {
  local out=$1 i
  shift
  for ((i = 1; i <= RUNS; i++)); do "$@" >"$out.$i"; done
  median_rows 5 "$out" "$out".[0-9]*
}

for ((i = 1; i <= RUNS; i++)); do
  log "anchors (Open MPI, Gloo, ceilings), run $i of $RUNS -> $OUT/anchors.$i"
  RANKS="2 4 8" GLOO_CONFIGS=ring OUT="$OUT/anchors.$i" "$SRC/run_anchors.sh" "${QUICK[@]}" \
    >"$OUT/anchors.$i.log" 2>&1 ||
    log "the anchors failed (see $OUT/anchors.$i.log); their columns may show -"
done
# The peers' sweeps: the median run per size; the ceilings: the first run's.
for f in "$OUT"/anchors.1/*.csv; do
  [[ -f $f ]] || continue
  name=${f##*/}
  case $name in
    mpi_*|gloo_*) median_rows 4 "$OUT/$name" "$OUT"/anchors.[0-9]*/"$name" ;;
    *) cp "$f" "$OUT/$name" ;;
  esac
done

tasks_sweep() {
  "$TPURT" bench --csv --tasks "$1" -b 8 -e "$MAXBYTES" -f 2 2>>"$OUT/tpurt_tasks_n$1.err" |
    sed -n 's/^\[0\] //p'
}
for n in 2 8; do
  log "tpurt bench, $n replicas ($RUNS runs)"
  median_sweep "$OUT/tpurt_n$n.csv" "$TPURT" bench --csv -r "$n" -b 8 -e "$MAXBYTES" -f 2 \
    2>>"$OUT/tpurt_n$n.err"
done
# Tasks of one core each under tpurt launch; task 0 prints, prefixed "[0] ".
for n in 2 4 8; do
  log "tpurt bench --tasks $n ($RUNS runs)"
  median_sweep "$OUT/tpurt_tasks_n$n.csv" tasks_sweep "$n"
done
log "tpurt empty step, 8 replicas"
"$TPURT" bench --csv --step -r 8 >"$OUT/tpurt_step_n8.csv"

# value FILE KEY_COLUMN KEY VALUE_COLUMN: the value in the row whose key matches, else "-".
value() {
  [[ -f $1 ]] || { echo -; return; }
  awk -F, -v kc="$2" -v key="$3" -v vc="$4" '
    /^#/ || !found_header { if (!/^#/) found_header = 1; next }
    $kc == key { v = $vc } END { print (v == "") ? "-" : v }' "$1"
}
# row LABEL MPI TPURT: one table row; values with 2 decimals, ratio = tpurt / MPI.
row() {
  awk -v label="$1" -v a="$2" -v b="$3" 'function f(x) { return x == "-" ? x : sprintf("%.2f", x) }
    BEGIN { r = (a == "-" || b == "-" || a + 0 == 0) ? "-" : sprintf("%.2fx", b / a)
            printf "| %s | %s | %s | %s |\n", label, f(a), f(b), r }'
}
# row3 LABEL MPI GLOO TPURT: a row of the tasks table, with tpurt / MPI and tpurt / Gloo.
row3() {
  awk -v label="$1" -v a="$2" -v g="$3" -v b="$4" '
    function f(x) { return x == "-" ? x : sprintf("%.2f", x) }
    function r(x, y) { return (x == "-" || y == "-" || x + 0 == 0) ? "-" : sprintf("%.2fx", y / x) }
    BEGIN { printf "| %s | %s | %s | %s | %s | %s |\n", label, f(a), f(g), f(b), r(a, b), r(g, b) }'
}
# meta KEY: a key=value from the "# ..." line of the n=8 tpurt CSV.
meta() { sed -n "s/^#.*[ ,]$1=\([^,]*\).*/\1/p" "$OUT/tpurt_n8.csv" | head -1; }

big_label=$(( BIG >> 20 ))" MiB"
TABLE=$OUT/compare.md
{
  echo "# tpurt vs Open MPI shared memory ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs)"
  echo
  echo "float32 SUM all-reduce; time = mean per call, max over ranks / replicas;"
  echo "busbw = bytes/time * 2(n-1)/n, GB = 1e9 B. Ratio = tpurt / MPI (latency: lower is"
  echo "better; busbw: higher is better)."
  echo
  echo "| n | metric | Open MPI (shared memory) | tpurt | ratio |"
  echo "|---|---|---|---|---|"
  for n in 2 8; do
    mpi=$OUT/mpi_sm_n$n.csv tp=$OUT/tpurt_n$n.csv
    row "$n | latency 8 B (us)" "$(value "$mpi" 1 8 4)" "$(value "$tp" 1 8 5)"
    row "$n | busbw $big_label (GB/s)" "$(value "$mpi" 1 "$BIG" 6)" "$(value "$tp" 1 "$BIG" 7)"
  done
  echo
  step=$(value "$OUT/tpurt_step_n8.csv" 1 8 4)
  [[ $step == - ]] || step=$(printf '%.2f' "$step")
  echo "- empty tpu_replicate step, 8 replicas: median $step us"
  echo "- meeting floor: 8 bare threads meet at a barrier in $(meta meeting_floor_us) us, waiting as"
  echo "  tpurt does with no tpurt code (pinned round-robin over the CPUs): no 8-replica collective beats it"
  awk -v b="$(meta memcpy_GBps)" 'BEGIN {
    printf "- memcpy bandwidth B (one thread, read + written): %.2f GB/s; an all-reduce writing\n", b
    printf "  every replica\047s output (tpurt --private, MPI) cannot beat busbw = B(P-1)/P^2:\n"
    printf "  %.2f GB/s at P=2, %.2f at P=8; tpurt shares one result per group by default,\n", b / 4, b * 7 / 64
    printf "  written once, which can beat it\n" }'
  echo "  (data that fit in the caches can beat it: the L3 cache holds $(lscpu | sed -n 's/^L3 cache: *\([0-9.]* [KMG]iB\).*/\1/p'))"
  wrong=$(awk -F, '!/^#/ && $8 ~ /^[0-9]+$/ { w += $8 } END { print w + 0 }' "$OUT"/tpurt_n*.csv)
  bad=$(cat "$OUT"/mpi_sm_n*.csv 2>/dev/null | awk -F, '$1 != "bytes" && $7 != "ok" { b++ } END { print b + 0 }')
  echo "- result checks: tpurt $wrong wrong elements; MPI $bad sizes not ok"
  echo
  echo
  echo "## Tasks over TCP on loopback (one core each) vs Open MPI over TCP and Gloo's ring"
  echo
  echo "| n | metric | Open MPI (TCP) | Gloo (ring) | tpurt tasks | vs MPI | vs Gloo |"
  echo "|---|---|---|---|---|---|---|"
  for n in 2 4 8; do
    tcp=$OUT/mpi_tcp_n$n.csv gloo=$OUT/gloo_ring_n$n.csv tp=$OUT/tpurt_tasks_n$n.csv
    row3 "$n | latency 8 B (us)" "$(value "$tcp" 1 8 4)" "$(value "$gloo" 1 8 4)" "$(value "$tp" 1 8 5)"
    row3 "$n | busbw 1 MiB (GB/s)" "$(value "$tcp" 1 1048576 6)" "$(value "$gloo" 1 1048576 6)" \
      "$(value "$tp" 1 1048576 7)"
    row3 "$n | busbw $big_label (GB/s)" "$(value "$tcp" 1 "$BIG" 6)" "$(value "$gloo" 1 "$BIG" 6)" \
      "$(value "$tp" 1 "$BIG" 7)"
  done
  echo
  echo "Every figure: the median of $RUNS runs of its contender, per size."
  echo "Raw data: $OUT (anchors.N/ and tpurt_*.csv.N: run N)."
} >"$TABLE"
cat "$TABLE"
