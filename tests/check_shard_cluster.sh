#!/usr/bin/env bash
# tpu_shard and tpu_batch_parallel across tasks (issue 27), on loopback: 2 tasks of 2
# cores under tpurt launch, over each data plane (TRANSPORTS, default "tcp shm"). Every
# task must return the whole outputs (uneven shards, other axes, stacked scalars, shard
# 0's output from another task, shards of 2 cores spanning tasks); a shard's NULL or
# mismatched output must fail the step with the same status and message on both tasks
# and change no embedding row; shards all on task 0 must be refused on both tasks
# alike (task 1 could not receive the outputs). tests/cluster/worker.c's "shard"
# scenario does the checks; this script compares the tasks' errors. Every run is
# bounded by `timeout`.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
tpurt=$BUILD/bin/tpurt
worker=$BUILD/tests/cluster_worker
[ -x "$tpurt" ] && [ -x "$worker" ] || { echo "check_shard_cluster: build $tpurt and $worker first" >&2; exit 1; }
source "$root/tests/cluster/report.sh"
export TPURT_HEARTBEAT_INTERVAL_MS=200 TPURT_HEARTBEAT_TIMEOUT_MS=3000
export TPURT_INIT_TIMEOUT_MS=30000 TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS=5000
# A step that hangs fails within the bound below instead of the default minutes.
export TEST_COLLECTIVE_TIMEOUT_MS=20000
unset TF_CONFIG SLURM_JOB_ID OMPI_COMM_WORLD_SIZE DTENSOR_JOBS TPURT_CLUSTER_TOKEN TPURT_TRANSPORT
TRANSPORTS=${TRANSPORTS:-tcp shm}

# same_on_both WHAT OUTPUT: tasks 0 and 1 printed one identical "shard WHAT: ..." line.
same_on_both() {
  local a b
  a=$(grep -F "[0] task 0: shard $1: " <<<"$2" | sed 's/^\[0\] task 0: //')
  b=$(grep -F "[1] task 1: shard $1: " <<<"$2" | sed 's/^\[1\] task 1: //')
  [ -n "$a" ] && [ "$a" = "$b" ] && [[ $a == *INVALID_ARGUMENT* ]]
}

for TPURT_TRANSPORT in $TRANSPORTS; do
  export TPURT_TRANSPORT
  out=$(timeout 120 "$tpurt" launch -n 2 --cores-per-task 2 -- "$worker" shard 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -qF "[0] task 0: shard ok" <<<"$out" && grep -qF "[1] task 1: shard ok" <<<"$out"; then
    ok "[$TPURT_TRANSPORT] tpu_shard and tpu_batch_parallel over 2 tasks: every task gets the whole outputs"
  else bad "[$TPURT_TRANSPORT] tpu_shard and tpu_batch_parallel over 2 tasks (exit $rc)" "$out"; fi
  for what in null mismatch "embedding null" nowhere; do
    if same_on_both "$what" "$out"; then
      ok "[$TPURT_TRANSPORT] tpu_shard ($what): the same error on both tasks"
    else bad "[$TPURT_TRANSPORT] tpu_shard ($what): the tasks' errors differ or are missing" \
      "$(grep -F "shard $what: " <<<"$out")"; fi
  done
done

echo "check_shard_cluster: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
