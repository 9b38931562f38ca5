#!/usr/bin/env bash
# compare.sh - tpurt's all-reduce next to Open MPI's shared-memory MPI_Allreduce
# (replicas in one process); and tpurt's tasks (processes on one host) over each of
# its transports, tcp, shm and mpi, next to Open MPI over shared memory and over TCP
# and Gloo's ring, for 2, 4 and 8 processes. All measured in the same run on this
# machine: two markdown tables, and busbw against size as PNGs (gnuplot) beside them.
#
# usage: bench/compare.sh [--quick]
#   --quick   the anchors' smoke run (n=2 only, sizes up to 1 MiB); the table then
#             compares bandwidth at 1 MiB instead of 16 MiB
# environment:
#   BUILD=build                     where `make` put bin/tpurt
#   ANCHORS=../shared/anchors       the anchor benchmarks (only read)
#   OUT=$BUILD/anchors/<timestamp>  where every CSV, log, the table and the plots go
#   RUNS=3                          runs of every contender (the anchors and tpurt's
#                                   sweeps); the tables take the median run per size
#   ALT_ROUNDS=5                    rounds of the bare MPI_Allreduce and tpurt's tasks
#                                   alternated for the targets' ratios (0: none)
#   TRANSPORTS="tcp shm mpi"        tpurt's transports for the tasks; mpi is skipped
#                                   (with a note) without mpirun or the plugin
#                                   ($BUILD/lib/libtpurt_mpi.so or TPURT_MPI_PLUGIN)
# A contender that fails is shown as missing, with its log; the rest still runs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
ANCHORS=${ANCHORS:-$ROOT/../shared/anchors}
OUT=${OUT:-$BUILD/anchors/$(date +%Y%m%d-%H%M%S)}
RUNS=${RUNS:-3}
ALT_ROUNDS=${ALT_ROUNDS:-5}
TRANSPORTS=${TRANSPORTS:-tcp shm mpi}
TPURT=$BUILD/bin/tpurt
TASK_NS="2 4 8"
QUICK=()
BIG=16777216 MAXBYTES=64M
case "${1:-}" in
  "") ;;
  --quick) QUICK=(--quick); BIG=1048576 MAXBYTES=1M TASK_NS=2 ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
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
# Contenders that did not run, one line each: what, why, where its log is.
MISSING=$OUT/missing.txt
: >"$MISSING"
missing() { echo "$*" >>"$MISSING"; log "missing: $*"; }
# median_sweep OUT RUN...: RUNS runs of tpurt's sweep RUN... (stderr to OUT's .err),
# and their median in OUT. A run that fails or prints no rows is kept aside as
# OUT.N.failed; after a first run fails the contender is given up, and with no good
# run OUT is not written and the contender is noted as missing.
median_sweep() {
  local out=$1 i rc good=()
  shift
  local err=${out%.csv}.err
  rm -f "$out" "$out".[0-9]*  # an earlier run's, with OUT reused
  for ((i = 1; i <= RUNS; i++)); do
    rc=0
    "$@" >"$out.$i" 2>>"$err" || rc=$?
    if ((rc == 0)) && grep -q '^[0-9]' "$out.$i"; then
      good+=("$out.$i")
      continue
    fi
    mv "$out.$i" "$out.$i.failed"
    log "run $i failed (exit $rc), see $err"
    ((${#good[@]})) || break
  done
  if ((${#good[@]} == 0)); then
    missing "${out##*/}: failed (exit $rc), see $err"
    return 0
  fi
  ((${#good[@]} == RUNS)) ||
    missing "${out##*/}: $((RUNS - ${#good[@]})) of $RUNS runs failed (median of the others), see $err"
  median_rows 5 "$out" "${good[@]}"
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
for n in $TASK_NS; do
  for name in mpi_sm mpi_tcp gloo_ring; do
    f=$OUT/${name}_n$n.csv
    [[ -f $f ]] && grep -q '^[0-9]' "$f" && continue
    rm -f "$f"
    missing "${f##*/}: the anchors produced no rows, see $OUT/anchors.1.log and $OUT/anchors.1/logs/"
  done
done

for n in 2 8; do
  log "tpurt bench, $n replicas ($RUNS runs)"
  median_sweep "$OUT/tpurt_n$n.csv" "$TPURT" bench --csv -r "$n" -b 8 -e "$MAXBYTES" -f 2
done

# tasks_sweep TRANSPORT N: tasks of one core each; task 0 alone prints (under tpurt
# launch with the prefix "[0] ", under mpirun bare); only the CSV's lines are kept.
tasks_sweep() {
  "$TPURT" bench --csv --tasks "$2" --transport "$1" -b 8 -e "$MAXBYTES" -f 2 |
    sed -n 's/^\[0\] //; /^#/p; /^size,/p; /^[0-9]/p'
}
# A library that chooses transports rejects an unknown TPURT_TRANSPORT; one that
# starts regardless ignores the variable, so its shm and mpi are skipped up front (their
# runs would fail anyway: tpurt bench fails when the library chose another transport).
IGNORED=
if [[ " $TRANSPORTS " != " tcp " ]] &&
  TPURT_TRANSPORT=compare-sh-no-such-transport "$TPURT" bench --tasks 2 --timeout 60 \
    -b 8 -e 8 -n 1 >"$OUT/transport_probe.log" 2>&1; then
  IGNORED="this libtpurt ignores TPURT_TRANSPORT (it started with an unknown value, see $OUT/transport_probe.log)"
fi
# Whether the tasks can run over TRANSPORT; if not, says why on stdout.
cannot_run() {
  local plugin=${TPURT_MPI_PLUGIN:-$BUILD/lib/libtpurt_mpi.so}
  [[ $1 == tcp ]] && return 1
  if [[ $1 == mpi ]]; then
    command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found (apt-get install openmpi-bin)"; return 0; }
    [[ -e $plugin ]] || { echo "the MPI plugin $plugin is not built (make mpi)"; return 0; }
  fi
  [[ -z $IGNORED ]] || { echo "$IGNORED"; return 0; }
  return 1
}
for t in $TRANSPORTS; do
  if why=$(cannot_run "$t"); then
    missing "tpurt_${t}_nN.csv, N = ${TASK_NS// /, }: skipped: $why"
    continue
  fi
  for n in $TASK_NS; do
    log "tpurt bench --tasks $n --transport $t ($RUNS runs)"
    median_sweep "$OUT/tpurt_${t}_n$n.csv" tasks_sweep "$t" "$n"
  done
done
# The machine's speed swings within minutes (8-byte latency of Open MPI and tpurt alike
# moving between 0.14 and 0.4 us), and the anchors run minutes before tpurt's sweeps. So
# for the ratios the targets name, the bare MPI_Allreduce and tpurt's tasks also
# alternate, ALT_ROUNDS times each, one size at a time: n,transport,bytes,round,
# mpi_us,tpurt_us per line.
ALT=$OUT/alternated.csv
: >"$ALT"
alternate() {  # N TRANSPORT BYTES
  local r m p
  for ((r = 1; r <= ALT_ROUNDS; r++)); do
    m=$(mpirun --oversubscribe --allow-run-as-root --mca oob_tcp_if_include lo -n "$1" \
      "$SRC/build/mpi_allreduce" -b "$3" -e "$3" -t 0.3 2>>"$OUT/alternated.err" |
      awk -F, '$1 ~ /^[0-9]+$/ { v = $4 } END { print v == "" ? "-" : v }')
    p=$("$TPURT" bench --csv --tasks "$1" --transport "$2" -b "$3" -e "$3" 2>>"$OUT/alternated.err" |
      sed -n 's/^\[0\] //; /^[0-9]/p' | awk -F, '{ v = $5 } END { print v == "" ? "-" : v }')
    echo "$1,$2,$3,$r,$m,$p" >>"$ALT"
  done
}
if command -v mpirun >/dev/null 2>&1 && [[ -x $SRC/build/mpi_allreduce ]] && ((ALT_ROUNDS > 0)); then
  for t in $TRANSPORTS; do
    [[ $t == tcp ]] && continue
    cannot_run "$t" >/dev/null && continue
    for n in $TASK_NS; do
      # The targets' sizes where a run's median can mislead: shm 8 B, mpi 8 B and 1 MiB.
      if [[ $t == shm ]]; then sizes=(8); else sizes=(8 1048576); fi
      for size in "${sizes[@]}"; do
        log "alternated: Open MPI and tpurt $t, n=$n, $size bytes ($ALT_ROUNDS rounds)"
        alternate "$n" "$t" "$size"
      done
    done
  done
fi

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
# rowt LABEL MPI_SM MPI_TCP GLOO TCP SHM MPI: a row of the tasks table, with the
# ratios tcp / MPI TCP, tcp / Gloo, shm / MPI shm, mpi / MPI shm.
rowt() {
  awk -v label="$1" -v msm="$2" -v mtcp="$3" -v g="$4" -v t="$5" -v sh="$6" -v m="$7" '
    function f(x) { return x == "-" ? x : sprintf("%.2f", x) }
    function r(x, y) { return (x == "-" || y == "-" || x + 0 == 0) ? "-" : sprintf("%.2fx", y / x) }
    BEGIN { printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label,
              f(msm), f(mtcp), f(g), f(t), f(sh), f(m), r(mtcp, t), r(g, t), r(msm, sh), r(msm, m) }'
}
# target TEXT RATIO OP LIMIT: a line saying whether RATIO (e.g. 0.85x) meets OP LIMIT.
target() {
  awk -v text="$1" -v r="$2" -v op="$3" -v lim="$4" 'BEGIN {
    if (r == "-") v = "not measured"
    else { x = r + 0; ok = (op == "<=") ? x <= lim : x >= lim; v = sprintf("%s (%s)", ok ? "met" : "NOT met", r) }
    printf "- %s: %s\n", text, v }'
}
# ratio FILE_A COL_A FILE_B COL_B KEY: B / A at size KEY, "-" if either is missing.
ratio() {
  awk -v a="$(value "$1" 1 "$5" "$2")" -v b="$(value "$3" 1 "$5" "$4")" 'BEGIN {
    print (a == "-" || b == "-" || a + 0 == 0) ? "-" : sprintf("%.2fx", b / a) }'
}
# alt N TRANSPORT BYTES: "MPI_MEDIAN TPURT_MEDIAN RATIO MPI_ROUNDS TPURT_ROUNDS" of the
# alternated rounds (ratio: tpurt / MPI for 8 bytes, a latency; MPI / tpurt above, a
# bandwidth), or nothing.
alt() {
  [[ -s $ALT ]] || return 0
  awk -F, -v n="$1" -v t="$2" -v b="$3" '
    function med(a, k,   i, j, x) {
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
      return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
    $1 == n && $2 == t && $3 == b {
      if ($5 != "-") { m[++km] = $5 + 0; ms = ms (ms == "" ? "" : " ") $5 }
      if ($6 != "-") { p[++kp] = $6 + 0; ps = ps (ps == "" ? "" : " ") $6 } }
    END {
      if (!km || !kp) exit
      a = med(m, km); c = med(p, kp)
      r = b == 8 ? c / a : a / c
      printf "%.3f %.3f %.2fx %s / %s\n", a, c, r, ms, ps }' "$ALT"
}
# alt_ratio N TRANSPORT BYTES: the alternated ratio, or "-".
alt_ratio() { local a; a=$(alt "$@"); [[ -n $a ]] && awk '{ print $3 }' <<<"$a" || echo -; }
# meta KEY: a key=value from the "# ..." line of the n=8 tpurt CSV.
meta() { sed -n "s/^#.*[ ,]$1=\([^,]*\).*/\1/p" "$OUT/tpurt_n8.csv" | head -1; }

# busbw against size, one PNG per process count, beside the table.
PLOTS=()
plot_rc=0
plot_out=$(bench/plot_busbw.sh "$OUT" $TASK_NS 2>"$OUT/plot.err") || plot_rc=$?
[[ -z $plot_out ]] || mapfile -t PLOTS <<<"$plot_out"
case $plot_rc in
  0) ;;
  3) log "no plots: $(cat "$OUT/plot.err")" ;;
  *) log "the plots failed, see $OUT/plot.err" ;;
esac

big_label=$(( BIG >> 20 ))" MiB"
BUSBW_SIZES=(1048576)
((BIG == 1048576)) || BUSBW_SIZES+=("$BIG")
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
    printf "  written once: its ceiling is 2B(P-1)/(P(P+1)), %.2f GB/s at P=2, %.2f at P=8\n", b / 3, b * 14 / 72 }'
  echo "  (data that fit in the caches can beat it: the L3 cache holds $(lscpu | sed -n 's/^L3 cache: *\([0-9.]* [KMG]iB\).*/\1/p'))"
  wrong=$(awk -F, '!/^#/ && $8 ~ /^[0-9]+$/ { w += $8 } END { print w + 0 }' "$OUT"/tpurt_n*.csv)
  bad=$(cat "$OUT"/mpi_sm_n*.csv 2>/dev/null | awk -F, '$1 != "bytes" && $7 != "ok" { b++ } END { print b + 0 }')
  echo "- result checks: tpurt $wrong wrong elements; MPI $bad sizes not ok"
  echo
  echo
  echo "## Tasks on one host (processes of one core each): tpurt's transports vs Open MPI and Gloo"
  echo
  echo "Open MPI's ranks and tpurt's tasks under mpirun --oversubscribe on loopback (Open MPI"
  echo "over shared memory by default, or TCP with btl self,tcp); Gloo's ring and tpurt's tcp"
  echo "and shm tasks (tpurt launch) on 127.0.0.1. tpurt's transport is the TPURT_TRANSPORT"
  echo "its tasks were given, which the library reported choosing (tpurt bench checks)."
  echo "Ratios = tpurt / peer (latency: lower is better; busbw: higher)."
  echo
  echo "| n | metric | Open MPI shm | Open MPI TCP | Gloo ring | tpurt tcp | tpurt shm | tpurt mpi | tcp / MPI TCP | tcp / Gloo | shm / MPI shm | mpi / MPI shm |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for n in $TASK_NS; do
    f=("$OUT/mpi_sm_n$n.csv" "$OUT/mpi_tcp_n$n.csv" "$OUT/gloo_ring_n$n.csv"
      "$OUT/tpurt_tcp_n$n.csv" "$OUT/tpurt_shm_n$n.csv" "$OUT/tpurt_mpi_n$n.csv")
    for size in 8 "${BUSBW_SIZES[@]}"; do
      if ((size == 8)); then label="latency 8 B (us)" pc=4 tc=5
      else label="busbw $((size >> 20)) MiB (GB/s)" pc=6 tc=7
      fi
      rowt "$n | $label" "$(value "${f[0]}" 1 "$size" $pc)" "$(value "${f[1]}" 1 "$size" $pc)" \
        "$(value "${f[2]}" 1 "$size" $pc)" "$(value "${f[3]}" 1 "$size" $tc)" \
        "$(value "${f[4]}" 1 "$size" $tc)" "$(value "${f[5]}" 1 "$size" $tc)"
    done
  done
  if [[ -s $ALT ]]; then
    echo
    echo "Alternated: the bare MPI_Allreduce (shared memory) and tpurt's tasks in turn,"
    echo "$ALT_ROUNDS rounds each, one size at a time; time per call in us, medians; ratio:"
    echo "tpurt / MPI for 8 bytes (latency), MPI / tpurt for 1 MiB (busbw)."
    echo
    echo "| n | transport | size | Open MPI (us) | tpurt (us) | ratio | rounds: Open MPI / tpurt |"
    echo "|---|---|---|---|---|---|---|"
    while IFS=, read -r n t b; do
      a=$(alt "$n" "$t" "$b")
      [[ -n $a ]] || continue
      read -r am ap ar arounds <<<"$a"
      echo "| $n | $t | $b B | $am | $ap | $ar | $arounds |"
    done < <(cut -d, -f1-3 "$ALT" | awk '!seen[$0]++')
  fi
  echo
  echo "Targets (issue 10; shm against Open MPI's shared memory, mpi against a bare MPI_Allreduce;"
  echo "the alternated ratio where there is one, else the sweeps'):"
  pick() { local r; r=$(alt_ratio "$1" "$2" "$3"); [[ $r != - ]] && echo "$r (alternated)" || echo "$4"; }
  target "shm latency 8 B, n=2, <= 1.00x Open MPI shm" \
    "$(pick 2 shm 8 "$(ratio "$OUT/mpi_sm_n2.csv" 4 "$OUT/tpurt_shm_n2.csv" 5 8)")" "<=" 1
  target "shm latency 8 B, n=8, <= 0.50x Open MPI shm" \
    "$(pick 8 shm 8 "$(ratio "$OUT/mpi_sm_n8.csv" 4 "$OUT/tpurt_shm_n8.csv" 5 8)")" "<=" 0.5
  target "shm busbw $big_label, n=8, >= 2.00x Open MPI shm" \
    "$(ratio "$OUT/mpi_sm_n8.csv" 6 "$OUT/tpurt_shm_n8.csv" 7 "$BIG")" ">=" 2
  for n in $TASK_NS; do
    target "mpi latency 8 B, n=$n, <= 1.50x Open MPI" \
      "$(pick "$n" mpi 8 "$(ratio "$OUT/mpi_sm_n$n.csv" 4 "$OUT/tpurt_mpi_n$n.csv" 5 8)")" "<=" 1.5
    for size in "${BUSBW_SIZES[@]}"; do
      target "mpi busbw $((size >> 20)) MiB, n=$n, >= 0.90x Open MPI" \
        "$(pick "$n" mpi "$size" "$(ratio "$OUT/mpi_sm_n$n.csv" 6 "$OUT/tpurt_mpi_n$n.csv" 7 "$size")")" ">=" 0.9
    done
  done
  if [[ -s $MISSING ]]; then
    echo
    echo "Missing (shown as -):"
    sed 's/^/- /' "$MISSING"
  fi
  wrong=$(cat /dev/null $(compgen -G "$OUT/tpurt_[a-z]*_n[0-9].csv" || true) |
    awk -F, '!/^#/ && $8 ~ /^[0-9]+$/ { w += $8 } END { print w + 0 }')
  bad=$(cat /dev/null $(compgen -G "$OUT/mpi_*_n[0-9].csv" || true) \
    $(compgen -G "$OUT/gloo_ring_n[0-9].csv" || true) |
    awk -F, '$1 ~ /^[0-9]+$/ && $7 != "ok" { b++ } END { print b + 0 }')
  echo
  echo "- result checks: tpurt's tasks $wrong wrong elements; Open MPI and Gloo $bad sizes not ok"
  echo
  if ((${#PLOTS[@]})); then
    echo "busbw against message size, every contender:"
    echo
    for png in "${PLOTS[@]}"; do echo "![busbw, ${png##*/}](${png##*/})"; done
  elif ((plot_rc == 3)); then
    echo "No plots: gnuplot is not installed (Debian: apt-get install gnuplot-nox), then"
    echo "bench/plot_busbw.sh $OUT draws them from this run."
  else
    echo "No plots: bench/plot_busbw.sh failed, see $OUT/plot.err."
  fi
  echo
  echo "Every figure: the median of $RUNS runs of its contender, per size."
  echo "Raw data: $OUT (anchors.N/ and tpurt_*.csv.N: run N)."
} >"$TABLE"
cat "$TABLE"
