#!/usr/bin/env bash
# The tpurt command and the example, as a user runs them: every command's --help,
# getopt-style options (-r8, --, --name=value), bad values and variables rejected
# with exit 2 and a message, bench --transport's errors, the transport the library
# chose in bench's output (a --transport it did not choose fails), the inclusive size
# range, demo (reporting, and failing only under --check), info with its environment,
# every collective's bench run with no wrong elements, and the example's sums.
set -euo pipefail
BUILD=${BUILD:-build}
TPURT=$BUILD/bin/tpurt
fail() { echo "check_tool: $*" >&2; exit 1; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT

# expect_usage WHAT FRAGMENT CMD...: CMD exits 2 with FRAGMENT in its message.
expect_usage() {
  local what=$1 fragment=$2 rc=0
  shift 2
  "$@" >/dev/null 2>"$err" || rc=$?
  [ "$rc" -eq 2 ] || fail "$what: exited $rc, not 2 (bad usage): $(cat "$err")"
  grep -qF -- "$fragment" "$err" || fail "$what: message lacks '$fragment': $(cat "$err")"
}

# Help: the overview, and each command's own usage on stdout with exit 0.
"$TPURT" --help | grep -q '^usage: tpurt <command>' || fail "tpurt --help"
for c in info bench demo; do
  out=$("$TPURT" "$c" --help) || fail "tpurt $c --help exited non-zero"
  grep -q "^usage: tpurt $c " <<<"$out" || fail "tpurt $c --help printed: $out"
  out=$("$TPURT" help "$c") || fail "tpurt help $c exited non-zero"
  grep -q "^usage: tpurt $c " <<<"$out" || fail "tpurt help $c printed: $out"
  grep -q -- '-r, --replicas' <<<"$out" || fail "tpurt $c lacks -r, --replicas"
done

# Bad options and values.
expect_usage "unknown collective" "unknown collective 'no_such'" "$TPURT" bench -c no_such
expect_usage "unknown option" "unknown option '--bogus'" "$TPURT" bench --bogus
expect_usage "missing value" "'--replicas' needs a value" "$TPURT" bench --replicas
expect_usage "operand" "unexpected argument 'extra'" "$TPURT" demo -- extra
expect_usage "-r 0" "--replicas: 0 is outside" "$TPURT" bench -r 0
expect_usage "-r abc" "'abc' is not an integer" "$TPURT" info -rabc
expect_usage "-b 1X" "bad suffix in '1X'" "$TPURT" bench -b 1X
expect_usage "-b > -e" "larger than --maxbytes" "$TPURT" bench -b 1M -e 1K
expect_usage "--tolerance" "'-1' is not a positive number" "$TPURT" demo --tolerance=-1
expect_usage "TPURT_YIELD_NS" "TPURT_YIELD_NS='20us'" env TPURT_YIELD_NS=20us "$TPURT" info
expect_usage "TPURT_NUM_CORES" "TPURT_NUM_CORES='0'" env TPURT_NUM_CORES=0 "$TPURT" demo
expect_usage "TPURT_TENSOR_CACHE_MB" "TPURT_TENSOR_CACHE_MB='-5'" \
  env TPURT_TENSOR_CACHE_MB=-5 "$TPURT" bench -r 2 -b 8 -e 8 -n 1

# Conflicting flags are usage errors naming both; a failure stops the command before
# it prints anything; no message is a raw C call.
no_c_call() { ! grep -Eq 'tpu_[a-z_]+ ?\(' "$err" || fail "$1: a raw C call: $(cat "$err")"; }
expect_usage "--cores vs --mesh" "--cores 3 and --mesh 2,1,1,2 disagree: that mesh holds 4 cores" \
  "$TPURT" info --cores 3 --mesh 2,1,1,2
no_c_call "info --cores 3 --mesh 2,1,1,2"
expect_usage "--replicas > cores" "--replicas 9 of 1 core each need 9 cores, but the system has 2" \
  "$TPURT" info --cores 2 -r 9
no_c_call "info -r 9"
expect_usage "--computation-shape > cores" "--computation-shape 2,1,1,2 holds 4 cores, but the system has 2" \
  "$TPURT" info --cores 2 --computation-shape 2,1,1,2
out=$("$TPURT" info --cores 2 -r 9 2>/dev/null) || true
[ -z "$out" ] || fail "info -r 9 printed after its usage error: $out"
rc=0
out=$("$TPURT" info --mesh 2,1,1,2 --computation-shape 3,1,1,1 2>"$err") || rc=$?
[ "$rc" -eq 1 ] || fail "a shape that does not fit the mesh: exited $rc, not 1: $(cat "$err")"
[ -z "$out" ] || fail "info printed before it failed: $out"
grep -q '^tpurt info: cannot place --replicas with --computation-shape on the mesh: ' "$err" ||
  fail "info's failure: $(cat "$err")"
no_c_call "info --computation-shape 3,1,1,1"
out=$("$TPURT" info --mesh 2,1,1,2) || fail "--mesh alone sets the cores: $out"
grep -Eq '^  cores +4 ' <<<"$out" || fail "--mesh 2,1,1,2 did not give 4 cores: $out"
for cmd in "info" "demo -r 2" "bench -r 2 -b 8 -e 8 -n 1"; do
  rc=0
  # shellcheck disable=SC2086
  TPURT_TRANSPORT=bogus "$TPURT" $cmd >/dev/null 2>"$err" || rc=$?
  [ "$rc" -ne 0 ] || fail "$cmd with TPURT_TRANSPORT=bogus succeeded"
  grep -q "TPURT_TRANSPORT='bogus'" "$err" || fail "$cmd: $(cat "$err")"
  no_c_call "$cmd"
done

# --transport: the names it takes, and what each needs; checked before anything starts.
expect_usage "--transport foo" "--transport: unknown transport 'foo' (tcp, shm or mpi)" \
  "$TPURT" bench --tasks 2 --transport foo
expect_usage "--transport=" "unknown transport ''" "$TPURT" bench --tasks 2 --transport=
expect_usage "--transport TCP" "unknown transport 'TCP'" "$TPURT" bench --tasks 2 --transport TCP
expect_usage "--transport alone" "--transport shm: needs --tasks N" "$TPURT" bench --transport shm
expect_usage "--transport missing value" "'--transport' needs a value" "$TPURT" bench --transport
expect_usage "--transport --step" "--step measures one process" \
  "$TPURT" bench --tasks 2 --transport tcp --step
expect_usage "--timeout 0" "--timeout: 0 is outside" "$TPURT" bench --tasks 2 --timeout 0
expect_usage "--timeout alone" "--timeout 5: needs --tasks N" "$TPURT" bench --timeout 5
expect_usage "--cores-per-task alone" "--cores-per-task 2: needs --tasks N" "$TPURT" bench --cores-per-task 2
# mpi: a TPURT_MPI_PLUGIN naming no file is a bad variable; a missing plugin or mpirun
# fails (exit 1) naming what is missing, whether or not MPI is installed here.
expect_usage "TPURT_MPI_PLUGIN" "TPURT_MPI_PLUGIN='/nonexistent/libtpurt_mpi.so'" \
  env TPURT_MPI_PLUGIN=/nonexistent/libtpurt_mpi.so "$TPURT" bench --tasks 2 --transport mpi
rc=0
env PATH=/nonexistent TPURT_MPI_PLUGIN="$BUILD/lib/libtpurt.so" \
  "$TPURT" bench --tasks 2 --transport mpi -b 8 -e 8 -n 1 >/dev/null 2>"$err" || rc=$?
[ "$rc" -eq 1 ] && grep -q 'mpirun is not on PATH' "$err" ||
  fail "--transport mpi without mpirun: exited $rc: $(cat "$err")"
if [ ! -e "$BUILD/lib/libtpurt_mpi.so" ]; then
  rc=0
  env -u TPURT_MPI_PLUGIN "$TPURT" bench --tasks 2 --transport mpi -b 8 -e 8 -n 1 \
    >/dev/null 2>"$err" || rc=$?
  [ "$rc" -eq 1 ] && grep -q "the MPI plugin .*/lib/libtpurt_mpi.so is missing" "$err" ||
    fail "--transport mpi without the plugin: exited $rc: $(cat "$err")"
fi
# The output names the transport the library chose, and why, in the table and the CSV.
rows=$("$TPURT" bench --tasks 2 --transport tcp -b 8 -e 8 -n 1 --csv 2>"$err") ||
  fail "--tasks 2 --transport tcp failed: $(cat "$err")"
grep -q '^\[0\] # tasks=2,transport=tcp$' <<<"$rows" || fail "--transport tcp CSV: $rows"
grep -q '^\[0\] 8,2,float32,sum,.*,0$' <<<"$rows" || fail "--transport tcp row: $rows"
out=$("$TPURT" bench --tasks 2 --transport tcp -b 8 -e 8 -n 1 2>"$err") ||
  fail "--tasks 2 --transport tcp (table) failed: $(cat "$err")"
grep -q '^\[0\] # 2 tasks of 1 core(s) on this host, transport tcp (.\+), started by tpurt launch$' \
  <<<"$out" || fail "--transport tcp table: $out"
# A stand-in for a library that chooses shm whatever it is asked (preloaded over
# libtpurt's tpu_system_transport and _reason; the data still go over TCP): the label
# is the library's answer, and a --transport it did not choose fails naming both.
fake=$(mktemp -d)
trap 'rm -f "$err"; rm -rf "$fake"' EXIT
"${CC:-cc}" -shared -fPIC -Iinclude -o "$fake/fake_transport.so" -x c - <<'EOF_C'
#include <string.h>
#include <tpurt.h>
static tpu_status put(const char *s, char *out, size_t capacity, size_t *count) {
  *count = strlen(s);
  if (out && capacity > *count) memcpy(out, s, *count + 1);
  return TPU_OK;
}
tpu_status tpu_system_transport(const tpu_system *system, char *out, size_t capacity,
                                size_t *count) {
  return put("shm", out, capacity, count);
}
tpu_status tpu_system_transport_reason(const tpu_system *system, char *out, size_t capacity,
                                       size_t *count) {
  return put("check_tool's stand-in always says shm", out, capacity, count);
}
EOF_C
# A sanitizer's runtime must come first among the preloaded libraries.
preload=$(ldd "$TPURT" | awk '$1 ~ /^lib[a-z]*san\.so/ {printf "%s:", $3}')$fake/fake_transport.so
rows=$(LD_PRELOAD=$preload "$TPURT" bench --tasks 2 -b 8 -e 8 -n 1 --csv \
  2>"$err") || fail "--tasks 2 under the stand-in failed: $(cat "$err")"
grep -q '^\[0\] # tasks=2,transport=shm$' <<<"$rows" || fail "the stand-in's CSV: $rows"
out=$(LD_PRELOAD=$preload "$TPURT" bench --tasks 2 -b 8 -e 8 -n 1 2>"$err") ||
  fail "--tasks 2 (table) under the stand-in failed: $(cat "$err")"
grep -q "^\[0\] # 2 tasks .*, transport shm (check_tool's stand-in always says shm)" <<<"$out" ||
  fail "the stand-in's table: $out"
rc=0
LD_PRELOAD=$preload "$TPURT" bench --tasks 2 --transport tcp -b 8 -e 8 -n 1 \
  >/dev/null 2>"$err" || rc=$?
[ "$rc" -eq 1 ] && grep -q -- "--transport tcp was asked for, but the library chose shm (check_tool's" \
  "$err" || fail "--transport tcp under a library choosing shm: exited $rc: $(cat "$err")"

# Bundled values and "--": -r3 -b8 run 3 replicas from 8 bytes.
rows=$("$TPURT" bench -r3 -b8 -e32 -f4 -n1 --csv --)
grep -q '^# collective=all_reduce,replicas=3,' <<<"$rows" || fail "-r3 not taken: $rows"
[ "$(grep -v '^#' <<<"$rows" | tail -n +2 | cut -d, -f1 | tr '\n' ' ')" = "8 32 " ] ||
  fail "-b8 -e32 -f4 measured: $rows"

# The range is inclusive: -e is measured, and the default sweep has the 16 MiB row.
rows=$("$TPURT" bench -r 2 -b 8 -e 1M -n 1 --csv 2>/dev/null)
grep -q '^1048576,' <<<"$rows" || fail "-b 8 -e 1M lacks the 1 MiB row: $rows"
rows=$("$TPURT" bench -r 2 -n 1 --csv 2>/dev/null)
grep -q '^16777216,' <<<"$rows" || fail "the default sweep lacks the 16 MiB row: $rows"
grep -q '^67108864,' <<<"$rows" || fail "the default sweep lacks its 64 MiB maximum: $rows"
# A size that is not whole elements is rounded up, and said so.
rows=$("$TPURT" bench -r 2 -b 3 -e 4 -n 1 --csv 2>"$err")
grep -q '^4,1,float32' <<<"$rows" || fail "-b 3 measured: $rows"
grep -q '3 B rounded up to 4 B' "$err" || fail "-b 3 rounded without a word: $(cat "$err")"
# Each collective's header names its own ceiling.
out=$("$TPURT" bench -c all_gather -r 2 -b 8 -e 8 -n 1)
grep -q 'all_gather' <<<"$out" && grep -q 'B(P-1)/(P(P+1))' <<<"$out" ||
  fail "all_gather header: $out"
# An all-reduce's header gives both ceilings, marks the one of its mode, and the CSV
# header has both (bench/compare.sh reads them).
out=$("$TPURT" bench -r 2 -b 8 -e 8 -n 1)
grep -q 'B(P-1)/P^2 = .* (--private)$' <<<"$out" &&
  grep -q '2B(P-1)/(P(P+1)) = .* (default)  <- this run$' <<<"$out" || fail "all_reduce header: $out"
out=$("$TPURT" bench -r 2 -b 8 -e 8 -n 1 --private)
grep -q '(--private)  <- this run$' <<<"$out" || fail "all_reduce --private header: $out"
rows=$("$TPURT" bench -r 2 -b 8 -e 8 -n 1 --csv)
grep -Eq '^# .*,busbw_ceiling_GBps=[0-9.]+,busbw_ceiling_shared_GBps=[0-9.]+,' <<<"$rows" ||
  fail "CSV header lacks a ceiling: $rows"

# demo reports the distance; it fails only when convergence is asked for.
out=$("$TPURT" demo -r 3 --steps 20) || fail "demo --steps 20 failed without --check: $out"
grep -q '^max |diff| = .*outside the tolerance' <<<"$out" || fail "demo did not report: $out"
rc=0
"$TPURT" demo -r 3 --steps 20 --check >/dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "demo --steps 20 --check exited $rc, not 1"
out=$("$TPURT" demo -r3 --check) || fail "demo --check failed: $out"
grep -q '^demo: OK' <<<"$out" || fail "demo did not converge: $(tail -3 <<<"$out")"

out=$(TPURT_TENSOR_CACHE_MB=64 "$TPURT" info --cores 4 --mesh=2,1,1,2)
grep -q '/job:localhost/replica:0/task:0/device:TPU:3' <<<"$out" || fail "info lacks device 3: $out"
grep -Eq '^  TPURT_TENSOR_CACHE_MB +64  \(set\)' <<<"$out" || fail "info lacks the cache size: $out"
grep -Eq '^  TPURT_YIELD_NS +[0-9]+  \(default\)' <<<"$out" || fail "info lacks TPURT_YIELD_NS: $out"
grep -Eq '^  transport +none \(.+\)$' <<<"$out" || fail "info lacks the transport and why: $out"

for c in all_reduce all_gather reduce_scatter all_to_all collective_permute broadcast; do
  for d in float32 bfloat16 int32; do
    rows=$("$TPURT" bench -c "$c" -d "$d" -r 3 -b 8 -e 64K -f 16 -n 5 --csv 2>/dev/null) ||
      fail "bench -c $c -d $d failed"
    # The #wrong column is last; every data row must have 0 there.
    wrong=$(grep -v '^#' <<<"$rows" | tail -n +2 | awk -F, '$NF != 0' | wc -l)
    [ "$wrong" -eq 0 ] || fail "bench -c $c -d $d reported wrong elements: $rows"
  done
done

# Several cores per replica: every group mode (its default groups) of 2 replicas of 2
# cores, each collective checked element by element against the group's inputs.
expect_usage "--group-mode" "unknown group mode 'rows'" "$TPURT" bench --group-mode rows
expect_usage "--cores-per-replica 3" "--cores-per-replica 3 does not divide the 4 cores" \
  "$TPURT" bench -r 4 --cores-per-replica 3
expect_usage "permute across replicas and partitions" "collective_permute has no such mode" \
  "$TPURT" bench -c collective_permute --group-mode cross-replica-and-partition
for m in cross-replica cross-partition cross-replica-and-partition flattened; do
  for c in all_reduce all_gather reduce_scatter all_to_all collective_permute broadcast; do
    [ "$m/$c" = cross-replica-and-partition/collective_permute ] && continue
    rows=$("$TPURT" bench -c "$c" -r 4 --cores-per-replica 2 --group-mode "$m" -b 8 -e 4K \
      -f 32 -n 3 --csv 2>/dev/null) || fail "bench -c $c --group-mode $m failed"
    case $m in cross-replica | cross-partition) size=2 ;; *) size=4 ;; esac
    grep -q "cores_per_replica=2,group_mode=$m,group_size=$size\$" <<<"$rows" ||
      fail "bench --group-mode $m header: $rows"
    wrong=$(grep -v '^#' <<<"$rows" | tail -n +2 | awk -F, '$NF != 0' | wc -l)
    [ "$wrong" -eq 0 ] || fail "bench -c $c --group-mode $m reported wrong elements: $rows"
  done
done

# demo --mesh: the MLP over ("batch", R) x ("model", K) matches one core; with one
# core (1,1) bit for bit, as nothing is reordered.
expect_usage "--mesh 2" "'2' is not 2 comma-separated" "$TPURT" demo --mesh 2
expect_usage "--hidden" "--hidden 6 is not a multiple of the 4 cores" "$TPURT" demo --mesh 1,4 --hidden 6
expect_usage "--batch" "--batch 10 is not a multiple of the 4 replicas" "$TPURT" demo --mesh 4,1 --batch 10
expect_usage "--batch alone" "only with --mesh" "$TPURT" demo --batch 8
for m in 1,1 2,2 1,4 4,1 3,2; do
  out=$("$TPURT" demo --mesh "$m" --batch 48 --steps 10) || fail "demo --mesh $m: $out"
  grep -q '^demo: OK' <<<"$out" && grep -q 'within the tolerance 1e-05' <<<"$out" &&
    grep -q '^step time: median' <<<"$out" || fail "demo --mesh $m printed: $out"
done
out=$("$TPURT" demo --mesh 1,1 --batch 48 --steps 10)
grep -q '/ max |w| = 0.00e+00,' <<<"$out" || fail "demo --mesh 1,1 differs from one core: $out"

# demo --embedding: the CTR model's tables, slots and dense weights match one core (with
# one replica bit for bit); a tolerance it cannot meet fails it. bench --embedding's
# first step matches Adagrad written out.
for r in 1 4 3; do
  out=$("$TPURT" demo --embedding -r "$r" --batch 96 --steps 30) || fail "demo --embedding -r $r: $out"
  grep -q '^demo: OK' <<<"$out" && grep -q 'within the tolerance 1e-06' <<<"$out" &&
    grep -Eq '^ +trained: +0\.[0-9]+ ' <<<"$out" || fail "demo --embedding -r $r printed: $out"
done
out=$("$TPURT" demo --embedding -r 1 --batch 96 --steps 30)
grep -q '/ max |w| = 0.00e+00, dense weights 0.00e+00:' <<<"$out" ||
  fail "demo --embedding -r 1 differs from one core: $out"
rc=0
out=$("$TPURT" demo --embedding -r 4 --batch 96 --steps 30 -t 1e-12) || rc=$?
[ "$rc" -eq 1 ] && grep -q '^demo: FAILED' <<<"$out" || fail "demo --embedding -t 1e-12: exit $rc: $out"
expect_usage "--embedding --batch" "--batch 10 is not a multiple of the 4 replicas" "$TPURT" demo --embedding --batch 10
expect_usage "--embedding --mesh" "one demo at a time" "$TPURT" demo --embedding --mesh 2,2
expect_usage "bench --embedding -c" "--embedding: measures the embedding step; not with --collective" \
  "$TPURT" bench --embedding -c all_gather
out=$("$TPURT" bench --embedding -r 2 -n 3) || fail "bench --embedding: $out"
grep -q '^# step 0 from a zero table against Adagrad written out: ok' <<<"$out" &&
  grep -Eq '^csv:[0-9.]+,[0-9]+,[0-9]+,' <<<"$out" || fail "bench --embedding printed: $out"

out=$(TPURT_NUM_CORES=4 "$BUILD/examples/hello_replicate")
grep -q '^replica 3: \[10, 20, 30, 40\]$' <<<"$out" || fail "example printed: $out"
# A 2 x 2 mesh: both cores of replica 1 get 11 + 12 + 13 + 14 (it exits nonzero otherwise).
# A pool of the program's own threads runs the replicas (join, leave), then ends at shutdown.
out=$(TPURT_NUM_CORES=4 timeout 60 "$BUILD/examples/caller_threads") || fail "caller_threads failed: $out"
grep -q '^step 2, replica 3: \[10, 80\]$' <<<"$out" && grep -q '^4 threads ran 3 steps each$' <<<"$out" ||
  fail "caller_threads printed: $out"
out=$("$BUILD/examples/mesh_step") || fail "mesh_step failed: $out"
grep -q '^replica 1: cores 0 and 1 got 50 and 50 (want 50)$' <<<"$out" || fail "mesh_step printed: $out"
out=$("$BUILD/examples/embedding_step") || fail "embedding_step failed: $out"
# Row 5: mean gradients 1/2 + 1 from each replica, SGD 0.5: 5 - 0.5 * 3.
grep -q '^replica 0: samples 2.5 and 5$' <<<"$out" && grep -q '^row 5 (core 1): 3.5$' <<<"$out" &&
  grep -q '^row 0 (core 0): -0.25$' <<<"$out" || fail "embedding_step printed: $out"
echo "check_tool: help, options, bad values, sizes, demo, info, bench of 6 collectives x 3 dtypes and x 4 group modes, demo --mesh, demo and bench --embedding, examples OK"
