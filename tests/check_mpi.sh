#!/usr/bin/env bash
# The multi-process tests over the MPI plugin (TPURT_TRANSPORT=mpi): Open MPI's
# mpirun --oversubscribe on loopback starts the tasks (the cluster worker,
# tests/cluster/worker.c), which join through the coordination service and move
# their data through libtpurt_mpi.so. Every collective, dtype and group assignment
# against the single-process references (reduce-scatters offloaded to MPI, counted),
# and replicas of several cores in every group mode;
# a task killed (kill -9), stopped, skipping a collective or calling another one ends
# in the named errors, then MPI_Abort where an MPI operation was left in flight. Skipped, saying why, when MPI is not installed. Every run is bounded
# by `timeout`.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
worker=$BUILD/tests/cluster_worker
plugin=$BUILD/lib/libtpurt_mpi.so

source "$root/tests/cluster/report.sh"
skip() {
  echo "check_mpi: the MPI tests were skipped: $1"
  echo "mpi: $passed passed, $failed failed"
  [ $failed -eq 0 ]
  exit
}
[ -x "$worker" ] && [ -x "$BUILD/tests/verdict_worker" ] && [ -x "$BUILD/bin/tpurt" ] ||
  { echo "check_mpi: build $worker, $BUILD/tests/verdict_worker and $BUILD/bin/tpurt first" >&2; exit 1; }

# The loader, which needs no MPI: a missing plugin, a library that is not one, and a
# plugin of another version are refused, saying so (TPU_FAILED_PRECONDITION at init).
# init_with PLUGIN: two tasks (tpurt launch) initialise with TPURT_MPI_PLUGIN=PLUGIN.
init_with() {
  out=$(TPURT_TRANSPORT=mpi TPURT_MPI_PLUGIN=$1 timeout 60 "$BUILD/bin/tpurt" launch -n 2 --cores-per-task 1 -- \
        "$worker" init 2>&1)
  rc=$?
}
init_with "$root/$BUILD/no-such-plugin.so"
if [ $rc -ne 0 ] && grep -q "init: FAILED_PRECONDITION: .*the MPI plugin .*no-such-plugin.so could not be loaded" <<<"$out"; then
  ok "a missing plugin: TPU_FAILED_PRECONDITION naming it"
else bad "a missing plugin (exit $rc)" "$out"; fi
init_with "$root/$BUILD/lib/libtpurt.so"
if [ $rc -ne 0 ] && grep -q "init: FAILED_PRECONDITION: .*libtpurt.so has no tpurt_mpi_plugin_v1" <<<"$out"; then
  ok "a library that is not a plugin: refused, naming the missing entry point"
else bad "a library that is not a plugin (exit $rc)" "$out"; fi
fake=$BUILD/tests/fake_mpi_plugin.so
printf '%s\n' '#include <stdint.h>' \
  'const void *tpurt_mpi_plugin_v1(void) { static const uint32_t t[2] = {8, 99}; return t; }' |
  ${CC:-cc} -shared -fPIC -x c -o "$fake" - || bad "compiling $fake"
init_with "$root/$fake"
if [ $rc -ne 0 ] && grep -q "init: FAILED_PRECONDITION: .*fake_mpi_plugin.so is MPI plugin version 99 .*needs version 1" <<<"$out"; then
  ok "a plugin of another version: refused before any call into it"
else bad "a plugin of another version (exit $rc)" "$out"; fi
rm -f "$fake"

# libtpurt itself never links MPI.
if readelf -d "$BUILD/lib/libtpurt.so" | grep -qi 'NEEDED.*mpi' ||
   nm -D --undefined-only "$BUILD/lib/libtpurt.so" | grep -q ' MPI_'; then
  bad "libtpurt.so links MPI"
else ok "libtpurt.so does not link MPI"
fi

[ -n "${SANITIZE:-}" ] &&
  skip "SANITIZE=$SANITIZE: Open MPI's own leaks and unsynchronised progress would be reported as tpurt's"
command -v mpirun >/dev/null 2>&1 || skip "mpirun not found (Debian's openmpi-bin: tools/install-deps.sh)"
if [ ! -e "$plugin" ]; then
  command -v mpicxx >/dev/null 2>&1 || command -v mpicc >/dev/null 2>&1 ||
    skip "no MPI compiler to build $plugin (Debian's libopenmpi-dev: tools/install-deps.sh)"
  make --no-print-directory mpi BUILD="$BUILD" SANITIZE="${SANITIZE:-}" >/dev/null || {
    echo "check_mpi: make mpi failed" >&2
    exit 1
  }
fi

exports=$(nm -D --defined-only "$plugin" | awk '{print $3}')
if [ "$exports" = tpurt_mpi_plugin_v1 ]; then ok "libtpurt_mpi.so exports only its entry point"
else bad "libtpurt_mpi.so exports more than its entry: $exports"; fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export TPURT_TRANSPORT=mpi TPURT_MPI_PLUGIN=$root/$plugin
export TPURT_HEARTBEAT_INTERVAL_MS=200 TPURT_HEARTBEAT_TIMEOUT_MS=3000
export TPURT_INIT_TIMEOUT_MS=30000 TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS=5000
unset TF_CONFIG SLURM_JOB_ID DTENSOR_JOBS TPURT_CLUSTER_TOKEN TEST_REORDERED_FOLDS
# Loopback only.
MPIRUN=(mpirun --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)

# mpi N CORES SECONDS ARGS...: runs the worker on N ranks of CORES cores; out, rc.
# The coordination service and the tasks listen on ports of their own.
mpi() {
  local n=$1 cores=$2 bound=$3 base addresses= i
  base=$(port_base "$n") || { rc=1; out="no free ports"; return; }
  shift 3
  for ((i = 0; i < n; i++)); do addresses+=${addresses:+,}127.0.0.1:$((base + i)); done
  out=$(TPURT_NUM_CORES=$cores TPURT_TASK_ADDRESSES=$addresses TPURT_COORDINATOR_ADDRESS=127.0.0.1:$base \
        timeout -k 5 "$bound" "${MPIRUN[@]}" -n "$n" "$worker" "$@" 2>&1)
  rc=$?
}
every_task_says() {
  local n=$1 text=$2 i
  for ((i = 0; i < n; i++)); do grep -qF "task $i: $text" <<<"$out" || return 1; done
}

# Two tasks: MPI adds two numbers in the only order there is, so every result is
# bit for bit one process's. From three on MPI folds one member per task in its own
# order: those floating-point all-reduces are checked within the error bound of a
# reordered fold (TEST_REORDERED_FOLDS); everything else still bit for bit.
for shape in "2 1" "2 2" "3 1" "3 2" "4 1" "4 2"; do
  set -- $shape
  how="bit for bit"
  unset TEST_REORDERED_FOLDS
  if [ "$1" -gt 2 ]; then
    export TEST_REORDERED_FOLDS=1
    how="floats within the reordered-fold bound"
  fi
  mpi "$1" "$2" 240 collectives
  if [ $rc -eq 0 ] && every_task_says "$1" "collectives ok" "$out"; then
    ok "every collective, dtype and group assignment over MPI: $1 ranks of $2 cores ($how)"
  else bad "collectives over MPI, $1 ranks of $2 cores (exit $rc)" "$out"; fi
done
unset TEST_REORDERED_FOLDS

# Replicas of 2 and 4 cores over 2 ranks of 4 (a replica's cores on both, or on one):
# every group mode x every collective against references, every result bit for bit
# one process's (two tasks: MPI's order is the only one). A core of task 1 skipping a
# collective of two members a task (point to point), or calling it in another group
# mode, is named on both tasks; nothing is left in flight and the next steps run.
model_parallel_reference "$worker"
mpi 2 4 240 model_parallel
if [ $rc -eq 0 ] && every_task_says 2 "model_parallel ok" && [ -n "$mp_reference" ] &&
   [ "$(model_parallel_digests "$out")" = "$mp_reference" ]; then
  ok "replicas of 2 and 4 cores over MPI, 2 ranks of 4: every group mode x every collective, partitioned inputs and outputs, bit for bit one process's"
else bad "replicas of 2 and 4 cores over MPI (exit $rc)" "$out
$mp_reference_out"; fi
mpi 2 4 90 model_parallel_skip
if [ $rc -eq 0 ] && every_task_says 2 "model_parallel_skip ok" && ! grep -q 'MPI_Abort' <<<"$out" &&
   [ "$(grep -c 'task [01]: model_parallel_skip skip: FAILED_PRECONDITION: .*replica 1 core 1 finished' <<<"$out")" = 2 ]; then
  ok "a core on task 1 skipping a collective, or in another group mode, over MPI: both tasks name it (replica 1 core 1); no abort"
else bad "a core on task 1 skipping a collective over MPI (exit $rc)" "$out"; fi

# Embedding tables sharded over 2 ranks of 2 cores and 4 of 1, DIV_DEFAULT and MOD:
# every activation, row and slot bit for bit one process's (the engine's own order of
# sums, whatever MPI's); failing steps change no row, and nothing is left in flight.
embedding_reference "$worker"
for shape in "2 2" "4 1"; do
  set -- $shape
  for strategy in div mod; do
    mpi "$1" "$2" 120 embedding $strategy
    if embedding_run_ok "$1" $strategy && ! grep -q 'MPI_Abort' <<<"$out"; then
      ok "embedding tables sharded $strategy over MPI, $1 ranks of $2 cores: activations, rows and slots bit for bit one process's; failing steps change no row"
    else bad "embedding tables sharded $strategy over MPI, $1 ranks of $2 cores (exit $rc)" "$out
$emb_reference_out"; fi
  done
done

# Infeed and outfeed of every replica over MPI: each task feeds its own replicas;
# another task's replica is TPU_INVALID_ARGUMENT naming it and its task.
for shape in "2 2" "4 1"; do
  set -- $shape
  mpi "$1" "$2" 120 feed
  if [ $rc -eq 0 ] && every_task_says "$1" "feed ok" &&
     [ "$(grep -c 'task [0-9]*: \(infeed enqueue\|outfeed dequeue\) for replica [0-9]*: INVALID_ARGUMENT: .*replica [0-9]* runs on task [0-9]*' <<<"$out")" = $((2 * $1)) ]; then
    ok "infeed and outfeed over MPI, $1 ranks of $2 cores: each task feeds its own replicas, another's is refused naming it"
  else bad "infeed and outfeed over MPI, $1 ranks of $2 cores (exit $rc)" "$out"; fi
done

# The reduce-scatters above went to MPI: every task counts its
# MPI_Ireduce_scatter_block calls (TPURT_MPI_STATS, printed when the transport
# closes). One member per task (1 core, all replicas) and pairs across 2 tasks of 2 cores.
for shape in "2 1" "4 1" "2 2"; do
  set -- $shape
  [ "$1" -gt 2 ] && export TEST_REORDERED_FOLDS=1
  TPURT_MPI_STATS=1 mpi "$1" "$2" 240 collectives
  unset TEST_REORDERED_FOLDS
  used=$(grep -c "^tpurt_mpi: task [0-9]*: .* [1-9][0-9]* MPI_Ireduce_scatter_block" <<<"$out")
  if [ $rc -eq 0 ] && every_task_says "$1" "collectives ok" && [ "$used" = "$1" ]; then
    ok "reduce-scatters offloaded to MPI_Ireduce_scatter_block on every task: $1 ranks of $2 cores"
  else bad "offloaded reduce-scatters, $1 ranks of $2 cores ($used tasks used MPI_Ireduce_scatter_block, exit $rc)" "$out"; fi
done

# Plugins of this version built before fields were appended to the table (a shim
# giving the real plugin's table with an older struct_size, SIZE): older_plugin FILE SIZE.
older_plugin() {
  printf '%s\n' '#include <dlfcn.h>' '#include <stddef.h>' '#include <stdlib.h>' '#include <string.h>' \
    '#include "net/mpi_plugin_api.h"' \
    'const tpurt_mpi_plugin *tpurt_mpi_plugin_v1(void) {' \
    '  static tpurt_mpi_plugin t;' \
    '  void *lib = t.version ? NULL : dlopen(getenv("TEST_REAL_MPI_PLUGIN"), RTLD_NOW | RTLD_GLOBAL);' \
    '  tpurt_mpi_plugin_entry e = lib ? (tpurt_mpi_plugin_entry)dlsym(lib, TPURT_MPI_PLUGIN_ENTRY) : NULL;' \
    "  if (e) memcpy(&t, e(), $2), t.struct_size = $2;" \
    '  return t.version ? &t : NULL;' '}' |
    ${CC:-cc} -shared -fPIC -Iinclude -Ilib -x c -o "$1" - -ldl || bad "compiling $1"
}
# Before reduce_scatter: it loads, and its reduce-scatters go to its all-reduce (the
# block copied out) or point to point.
old_plugin=$BUILD/tests/old_mpi_plugin.so
older_plugin "$old_plugin" TPURT_MPI_PLUGIN_BASE_SIZE
TEST_REAL_MPI_PLUGIN=$root/$plugin TPURT_MPI_PLUGIN=$root/$old_plugin TPURT_MPI_STATS=1 mpi 2 1 240 collectives
if [ $rc -eq 0 ] && every_task_says 2 "collectives ok" &&
   [ "$(grep -c '^tpurt_mpi: task [01]: .* [1-9][0-9]* MPI_Iallreduce, 0 MPI_Ireduce_scatter_block' <<<"$out")" = 2 ]; then
  ok "a plugin table without reduce_scatter (older, same version): loads; reduce-scatters correct without it"
else bad "a plugin table without reduce_scatter (exit $rc)" "$out"; fi
rm -f "$old_plugin"
# Before vote: the tasks do not vote (each reports what its own waits found), and the
# engine collectives run on whatever a task's peers did. The failures below are run
# with it too, as the ones the vote now settles first: a task in an MPI collective its
# peers never join, or join as another, is still named, and then aborts the job.
novote_plugin=$BUILD/tests/novote_mpi_plugin.so
older_plugin "$novote_plugin" "offsetof(tpurt_mpi_plugin, vote)"
export TEST_REAL_MPI_PLUGIN=$root/$plugin
# novote CMD...: CMD with the plugin without vote.
novote() { TPURT_MPI_PLUGIN=$root/$novote_plugin "$@"; }

abort_note='an MPI collective in flight cannot be cancelled'

# kill -9 of rank 2 in a step: the others get TPU_UNAVAILABLE naming it (from the
# coordination service). One already in its MPI_Iallreduce prints it, then calls
# MPI_Abort; one that learns it before it starts the collective has nothing in flight.
# --enable-recovery: mpirun does not end the others when a rank dies (nor does it
# then report MPI_Abort in its exit status): they must notice and name it themselves.
# kill_rank_2 IN: the case above; IN (" in a reduce-scatter" or empty) names the collective.
saved=("${MPIRUN[@]}")
kill_rank_2() {
  MPIRUN+=(--enable-recovery)
  mpi 3 1 90 kill 2
  MPIRUN=("${saved[@]}")
  if grep -q 'task 0: kill of task 2: UNAVAILABLE.*task 2' <<<"$out" &&
     grep -q 'task 1: kill of task 2: UNAVAILABLE.*task 2' <<<"$out" &&
     { ! grep -q "MPI_Abort follows" <<<"$out" ||
       { grep -q "tpurt: task [01]: TPU_UNAVAILABLE: .*task 2.*$abort_note" <<<"$out" &&
         grep -q "tpurt: task [01]: MPI_Abort.*$abort_note" <<<"$out"; }; }; then
    ok "kill -9 of rank 2$1: ranks 0 and 1 get TPU_UNAVAILABLE naming it (then MPI_Abort if in flight)"
  else bad "kill -9 of a rank$1 over MPI (exit $rc)" "$out"; fi
}
kill_rank_2 ""

# Task 1 skips a collective. With two cores a task the all-reduce goes point to
# point: the small sends completed, nothing is left in flight and the tasks go on.
mpi 2 2 90 skip 1
if [ $rc -eq 0 ] && every_task_says 2 "skip ok" "$out" && grep -q 'FAILED_PRECONDITION.*task 1' <<<"$out" &&
   ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "task 1 skipping a collective is named at once (TPU_FAILED_PRECONDITION); nothing in flight, no abort"
else bad "a skipped collective over MPI, point to point (exit $rc)" "$out"; fi
# With one core a task it is MPI_Iallreduce, which cannot be cancelled: the tasks'
# vote before it names task 1, and no task starts it. Without the vote: named error,
# then MPI_Abort.
mpi 2 1 90 skip 1
if [ $rc -eq 0 ] && every_task_says 2 "skip ok" && grep -q 'task 0: skip of task 1: FAILED_PRECONDITION.*task 1' <<<"$out" &&
   ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "task 1 skipping an MPI_Iallreduce: the vote names it (TPU_FAILED_PRECONDITION) before any task starts it; no abort"
else bad "a skipped MPI_Iallreduce (exit $rc)" "$out"; fi
novote mpi 2 1 90 skip 1
if [ $rc -ne 0 ] && grep -q 'task 0: skip of task 1: FAILED_PRECONDITION.*task 1' <<<"$out" &&
   grep -q "tpurt: task 0: TPU_FAILED_PRECONDITION: .*task 1.*$abort_note" <<<"$out" &&
   grep -q "MPI_Abort.*$abort_note" <<<"$out"; then
  ok "without the vote, task 1 skipping an MPI_Iallreduce: TPU_FAILED_PRECONDITION naming it, then MPI_Abort saying why"
else bad "without the vote, a skipped MPI_Iallreduce (exit $rc)" "$out"; fi

# A replica of task 1 fails. Two cores a task: point to point, and the sends to task 1
# (of a size MPI sends only once received) complete when task 1 drains them at the end
# of the step; every task gets the error and the next step runs. One core a task: the
# vote settles it before the MPI_Iallreduce; without the vote the others are in an
# MPI_Iallreduce task 1 never joins: the error, then MPI_Abort.
mpi 3 2 90 fail 1
if [ $rc -eq 0 ] && every_task_says 3 "fail ok" "$out" && ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "a replica's failure on task 1 (point to point): every task gets its error; the next step runs"
else bad "a failing replica over MPI, point to point (exit $rc)" "$out"; fi
mpi 3 1 90 fail 1
if [ $rc -eq 0 ] && every_task_says 3 "fail ok" &&
   [ "$(grep -c 'task [02]: fail of task 1: DATA_LOSS.*injected failure' <<<"$out")" = 2 ] &&
   ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "a replica's failure on task 1 before an MPI_Iallreduce: the vote gives every task its error first; no abort"
else bad "a failing replica over MPI, MPI_Iallreduce (exit $rc)" "$out"; fi
# (Tasks that learn of the failure from task 1's end before they start the collective
# do not start it: on a loaded host every task may, and the step ends cleanly there.)
novote mpi 3 1 90 fail 1
if [ $rc -ne 0 ] && grep -q 'task [02]: fail of task 1: DATA_LOSS.*injected failure' <<<"$out" &&
   grep -q "tpurt: task [02]: MPI_Abort.*$abort_note" <<<"$out"; then
  ok "without the vote, a replica's failure on task 1 while the others are in MPI_Iallreduce: its error, then MPI_Abort"
elif [ $rc -eq 0 ] && every_task_says 3 "fail ok" &&
   [ "$(grep -c 'task [02]: fail of task 1: DATA_LOSS.*injected failure' <<<"$out")" = 2 ] &&
   ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "without the vote, a replica's failure on task 1 reached the others before their MPI_Iallreduce: its error everywhere, no abort"
else bad "without the vote, a failing replica over MPI, MPI_Iallreduce (exit $rc)" "$out"; fi

# The same in an offloaded reduce-scatter (MPI_Ireduce_scatter_block, one member per
# task): kill -9 of rank 2, and task 1 skipping it.
export TEST_FAULT_COLLECTIVE=reduce_scatter
kill_rank_2 " in a reduce-scatter"
mpi 4 1 90 skip 1
if [ $rc -eq 0 ] && every_task_says 4 "skip ok" &&
   [ "$(grep -c 'task [023]: skip of task 1: FAILED_PRECONDITION.*task 1' <<<"$out")" = 3 ] &&
   ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "task 1 skipping an MPI_Ireduce_scatter_block: the vote names it (TPU_FAILED_PRECONDITION) before any task starts it; no abort"
else bad "a skipped MPI_Ireduce_scatter_block (exit $rc)" "$out"; fi
# (A task that learns of the skip from task 1's end before it starts the collective
# does not start it; the one that did prints the step's error, its own or a peer's.)
novote mpi 4 1 90 skip 1
if [ $rc -ne 0 ] && [ "$(grep -c 'task [023]: skip of task 1: FAILED_PRECONDITION.*task 1' <<<"$out")" = 3 ] &&
   grep -q "tpurt: task [023]: TPU_[A-Z_]*: .*task 1.*$abort_note" <<<"$out" &&
   grep -q "MPI_Abort.*$abort_note" <<<"$out"; then
  ok "without the vote, task 1 skipping an MPI_Ireduce_scatter_block: TPU_FAILED_PRECONDITION naming it, then MPI_Abort saying why"
else bad "without the vote, a skipped MPI_Ireduce_scatter_block (exit $rc)" "$out"; fi
unset TEST_FAULT_COLLECTIVE

# Task 1's replicas call another collective: an all-gather while the others all-reduce
# with MPI_Iallreduce (one core a task), or an all-reduce with MAX (the same counts:
# MPI would match the two and complete both with wrong sums). The tasks' vote before
# the collective gives every task the same TPU_INVALID_ARGUMENT, worded from every
# replica's descriptor as one process words it (which task called what); no task starts
# the MPI collective. Without the vote: the tasks' notes of the collective they entered
# name task 1 on the others (and them on task 1), then MPI_Abort for the all-reduce in
# flight; for MAX, the note each task sends on entering an MPI collective, checked once
# it completes (TPURT_MPI_CHECK_COLLECTIVES, on by default), names it; nothing is left in flight.
# voted_mismatch N OTHER: every one of N tasks reports the verdict that replica 1 (task 1) called OTHER.
voted_mismatch() {
  [ $rc -eq 0 ] && every_task_says "$1" "mismatch ok" && ! grep -q 'MPI_Abort' <<<"$out" &&
    [ "$(grep -c "task [0-9]: mismatch of task 1: INVALID_ARGUMENT.*collective #2: replicas disagree.*: replica [12] called $2.*(by task: .*task 1 (replica[s0-9, ]*) called $2" <<<"$out")" = "$1" ]
}
mpi 3 1 90 mismatch 1
if voted_mismatch 3 all_gather; then
  ok "task 1 in another collective than the others' MPI_Iallreduce: the vote gives every task the same TPU_INVALID_ARGUMENT naming it; no abort"
else bad "a task in another collective than MPI_Iallreduce (exit $rc)" "$out"; fi
TEST_MISMATCH=max mpi 3 1 90 mismatch 1
if voted_mismatch 3 "all_reduce .* op=max"; then
  ok "task 1 in an MPI_Iallreduce of another op: the vote gives every task the same TPU_INVALID_ARGUMENT naming it; no abort"
else bad "a task in an all-reduce of another op over MPI (exit $rc)" "$out"; fi
novote mpi 3 1 90 mismatch 1
if [ $rc -ne 0 ] && [ "$(grep -c 'task [02]: mismatch of task 1: INVALID_ARGUMENT.*task 1 (replica 1) is in collective #2 of the step' <<<"$out")" = 2 ] &&
   grep -q 'task 1: mismatch of task 1: INVALID_ARGUMENT.*while this task is in collective #2' <<<"$out" &&
   grep -q "tpurt: task [02]: MPI_Abort.*$abort_note" <<<"$out"; then
  ok "without the vote, task 1 in another collective while the others are in MPI_Iallreduce: TPU_INVALID_ARGUMENT naming it, then MPI_Abort"
else bad "without the vote, a task in another collective than MPI_Iallreduce (exit $rc)" "$out"; fi
TEST_MISMATCH=max novote mpi 3 1 90 mismatch 1
if [ $rc -eq 0 ] && every_task_says 3 "mismatch ok" &&
   [ "$(grep -c 'task [02]: mismatch of task 1: INVALID_ARGUMENT.*task 1 (replica 1) is in collective #2' <<<"$out")" = 2 ] &&
   ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "without the vote, task 1 in an MPI_Iallreduce of another op: TPU_INVALID_ARGUMENT naming it (the notes), no abort"
else bad "without the vote, a task in an all-reduce of another op over MPI (exit $rc)" "$out"; fi
TPURT_MPI_CHECK_COLLECTIVES=yes mpi 2 1 90 init
if [ $rc -ne 0 ] && grep -q "init: INVALID_ARGUMENT: .*TPURT_MPI_CHECK_COLLECTIVES is 'yes'; it must be 1 (the default) or 0" <<<"$out"; then
  ok "TPURT_MPI_CHECK_COLLECTIVES=yes: tpu_system_init fails naming the value"
else bad "a bad TPURT_MPI_CHECK_COLLECTIVES (exit $rc)" "$out"; fi
# Two cores a task: point to point on both sides; named, no abort.
mpi 2 2 90 mismatch 1
if voted_mismatch 2 all_gather; then
  ok "task 1 in another collective (point to point): the same TPU_INVALID_ARGUMENT on both tasks naming it, no abort"
else bad "a task in another collective over MPI, point to point (exit $rc)" "$out"; fi

# All-reduces of up to 2 KiB go point to point (8 bytes here), every message behind a
# header naming the collective. With the vote, a task in the same collective with
# another op, shape or dtype, or in another collective, is named by the vote as above;
# without it, from its header, or (an all-gather) from its note. Skipping, failing and
# stopped tasks are named as over MPI_Iallreduce. The receives are cancelled and the
# small sends complete, so nothing is left in flight.
export TEST_FAULT_ELEMENTS=2
for other in max shape dtype gather; do
  case $other in
    max) called="all_reduce float32\\[2\\] op=max" ;;
    shape) called="all_reduce float32\\[3\\]" ;;
    dtype) called="all_reduce int32" ;;
    gather) called=all_gather ;;
  esac
  TEST_MISMATCH=$other mpi 3 1 90 mismatch 1
  if voted_mismatch 3 "$called"; then
    ok "8-byte all-reduce, task 1 in another ($other): the same TPU_INVALID_ARGUMENT on every task naming it; no abort"
  else bad "8-byte all-reduce, task 1 in another ($other) (exit $rc)" "$out"; fi
  TEST_MISMATCH=$other novote mpi 3 1 90 mismatch 1
  if [ $rc -eq 0 ] && every_task_says 3 "mismatch ok" &&
     [ "$(grep -c 'task [02]: mismatch of task 1: INVALID_ARGUMENT.*task 1 (replica 1) is in collective #2' <<<"$out")" = 2 ] &&
     grep -q 'task 1: mismatch of task 1: INVALID_ARGUMENT.*task [02] (replica [02]) is in collective #2' <<<"$out" &&
     ! grep -q 'MPI_Abort' <<<"$out"; then
    ok "without the vote, 8-byte all-reduce, task 1 in another ($other): TPU_INVALID_ARGUMENT on every task naming the other side; no abort"
  else bad "without the vote, 8-byte all-reduce, task 1 in another ($other) (exit $rc)" "$out"; fi
done
mpi 2 1 90 skip 1
if [ $rc -eq 0 ] && every_task_says 2 "skip ok" && grep -q 'task 0: skip of task 1: FAILED_PRECONDITION.*task 1' <<<"$out" &&
   ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "8-byte all-reduce, task 1 skipping it: TPU_FAILED_PRECONDITION naming it; no abort"
else bad "8-byte all-reduce, a skipped collective (exit $rc)" "$out"; fi
mpi 3 1 90 fail 1
if [ $rc -eq 0 ] && every_task_says 3 "fail ok" && ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "8-byte all-reduce, a replica's failure on task 1: every task gets its error; the next step runs"
else bad "8-byte all-reduce, a failing replica (exit $rc)" "$out"; fi
# Nothing aborts the job here, and MPI_Finalize waits for the stopped rank: the bound ends it.
TPURT_HEARTBEAT_TIMEOUT_MS=30000 TEST_COLLECTIVE_TIMEOUT_MS=2000 mpi 4 1 40 stop 2
if [ "$(grep -c '^task [013]: stop of task 2: DEADLINE_EXCEEDED.*no data arrived from task 2 (replica 2) before' <<<"$out")" = 3 ]; then
  ok "8-byte all-reduce, SIGSTOP of rank 2: ranks 0, 1 and 3 get TPU_DEADLINE_EXCEEDED naming it alone"
else bad "8-byte all-reduce, SIGSTOP of a rank (exit $rc)" "$out"; fi
unset TEST_FAULT_ELEMENTS

# A task late to an MPI_Iallreduce (1024 floats) its peers gave up on at their deadline
# (tests/cluster/verdict_worker.c's "late", one group of 4 tasks): it gets their
# verdict (TPU_DEADLINE_EXCEEDED naming its late core) from their ends before it would
# start the collective, which nobody would join; no abort.
saved_worker=$worker
worker=$BUILD/tests/verdict_worker
VERDICT_ELEMENTS=1024 VERDICT_TIMEOUT_MS=2000 mpi 4 1 60 late all
worker=$saved_worker
if [ $rc -eq 0 ] && [ "$(grep -c '^verdict P[0-3] collective DEADLINE_EXCEEDED culprit=yes' <<<"$out")" = 4 ] &&
   ! grep -q 'MPI_Abort' <<<"$out"; then
  ok "a task late to an MPI_Iallreduce its peers gave up on: their TPU_DEADLINE_EXCEEDED before it starts it; no abort"
else bad "a task late to an MPI_Iallreduce its peers gave up on (exit $rc)" "$out"; fi

# SIGSTOP of rank 2 (heartbeats too slow to notice). With the vote it is the 8-byte
# case above (the ballots are point to point). Without it, the deadline names it, and
# only it, though MPI_Iallreduce does not say who is missing (the others answer who asks).
TPURT_HEARTBEAT_TIMEOUT_MS=30000 TEST_COLLECTIVE_TIMEOUT_MS=2000 novote mpi 4 1 90 stop 2
if [ $rc -ne 0 ] && every_task_says 2 "stop of task 2: DEADLINE_EXCEEDED" "$out" &&
   grep -q 'task 3: stop of task 2: DEADLINE_EXCEEDED' <<<"$out" &&
   [ "$(grep -c '^task [013]: stop of task 2: DEADLINE_EXCEEDED.*MPI_Iallreduce waited for task 2 (replica 2), which never joined it' <<<"$out")" = 3 ] &&
   grep -q "MPI_Abort.*$abort_note" <<<"$out"; then
  ok "without the vote, SIGSTOP of rank 2: ranks 0, 1 and 3 get TPU_DEADLINE_EXCEEDED naming it alone, then MPI_Abort"
else bad "without the vote, SIGSTOP of a rank over MPI (exit $rc)" "$out"; fi
rm -f "$novote_plugin"
unset TEST_REAL_MPI_PLUGIN

# Tasks that are not MPI's ranks (tpurt launch starts them, each its own MPI world):
# TPURT_TRANSPORT=mpi refuses, saying why.
out=$(timeout 60 "$BUILD/bin/tpurt" launch -n 2 --cores-per-task 1 -- "$worker" init 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q "init: FAILED_PRECONDITION: .*MPI's world is rank 0 of 1 but this is task [01] of 2" <<<"$out"; then
  ok "tasks that are not the ranks of one MPI world: TPU_FAILED_PRECONDITION saying so"
else bad "TPURT_TRANSPORT=mpi outside mpirun (exit $rc)" "$out"; fi

# Chosen by itself: under mpirun with the plugin installed, auto takes MPI; without
# the plugin, the tasks of this host share memory instead, and say why.
unset TPURT_TRANSPORT
mpi 3 1 90 init
if [ $rc -eq 0 ] && every_task_says 3 "transport mpi (every task was started by mpirun and the MPI plugin is installed)" "$out"; then
  ok "TPURT_TRANSPORT unset under mpirun with the plugin: mpi, saying why"
else bad "auto under mpirun (exit $rc)" "$out"; fi
TPURT_MPI_PLUGIN=$root/$BUILD/no-such-plugin.so mpi 2 1 90 init
if [ $rc -eq 0 ] && every_task_says 2 "transport shm (every task runs on this host; mpirun started the tasks, but not MPI: " "$out"; then
  ok "TPURT_TRANSPORT unset under mpirun without the plugin: shared memory, saying why not MPI"
else bad "auto under mpirun without the plugin (exit $rc)" "$out"; fi

echo "mpi: $passed passed, $failed failed"
[ $failed -eq 0 ]
