#!/usr/bin/env bash
# tpu_shard and tpu_batch_parallel across tasks (issue 27), on loopback: 2 tasks of 2
# cores and 3 of 1 under tpurt launch, over each data plane (TRANSPORTS, default
# "tcp shm"). Every task must return the whole outputs (uneven shards, other axes,
# stacked scalars, shard 0's output from another task, shards of 2 cores spanning
# tasks, large outputs); a shard's NULL or mismatched output must fail the step with
# the same status and message on every task and change no embedding row; shards all
# on task 0 must be refused on every task alike (the others could not receive the
# outputs). tests/cluster/worker.c's "shard" scenario does the checks; this script
# compares the tasks' errors. Every run is bounded by `timeout`.
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

# same_on_all N WHAT OUTPUT: tasks 0..N-1 printed one identical "shard WHAT: ..." line,
# an INVALID_ARGUMENT.
same_on_all() {
  local n=$1 what=$2 out=$3 first= line i
  for ((i = 0; i < n; i++)); do
    line=$(grep -F "[$i] task $i: shard $what: " <<<"$out" | sed "s/^\[$i\] task $i: //")
    [ -n "$line" ] || return 1
    [ -z "$first" ] && first=$line
    [ "$line" = "$first" ] || return 1
  done
  [[ $first == *INVALID_ARGUMENT* ]]
}

for TPURT_TRANSPORT in $TRANSPORTS; do
  export TPURT_TRANSPORT
  # 2 tasks of 2 cores (shards of 2 cores spanning them too), and 3 tasks of 1.
  for shape in "2 2" "3 1"; do
    set -- $shape
    out=$(timeout 120 "$tpurt" launch -n "$1" --cores-per-task "$2" -- "$worker" shard 2>&1)
    rc=$?
    all_ok=1
    for ((i = 0; i < $1; i++)); do grep -qF "[$i] task $i: shard ok" <<<"$out" || all_ok=0; done
    if [ $rc -eq 0 ] && [ $all_ok = 1 ]; then
      ok "[$TPURT_TRANSPORT] tpu_shard and tpu_batch_parallel over $1 tasks of $2 cores: every task gets the whole outputs"
    else bad "[$TPURT_TRANSPORT] tpu_shard and tpu_batch_parallel over $1 tasks of $2 cores (exit $rc)" "$out"; fi
    for what in null mismatch "embedding null" nowhere; do
      if same_on_all "$1" "$what" "$out"; then
        ok "[$TPURT_TRANSPORT] tpu_shard over $1 tasks ($what): the same error on every task"
      else bad "[$TPURT_TRANSPORT] tpu_shard over $1 tasks ($what): the tasks' errors differ or are missing" \
        "$(grep -F "shard $what: " <<<"$out")"; fi
    done
  done
done

echo "check_shard_cluster: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
