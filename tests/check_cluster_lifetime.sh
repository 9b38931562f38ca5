#!/usr/bin/env bash
# The cluster's own lifetime, on loopback (tpurt launch, or tasks started by hand with
# DTensor's environment):
#  - a 2-task system released and started again in the same processes, 20 times in a
#    row, over each data plane (tcp, shm, and mpi under mpirun when MPI and the plugin
#    are there), one checked cross_replica_sum step a round, with either task lingering
#    0-50 ms before or after its release (tests/cluster/lifetime_worker.c);
#  - a flood of connections that never send a byte, from 127.0.0.1 (the tasks' own
#    address), against task 0's port: four tasks join within their init timeout and
#    run a step; a task joining a running task 0 under the flood joins within its own.
# Every run is bounded by `timeout`.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
tpurt=$BUILD/bin/tpurt
worker=$BUILD/tests/lifetime_worker
[ -x "$tpurt" ] && [ -x "$worker" ] || { echo "check_cluster_lifetime: build $tpurt and $worker first" >&2; exit 1; }
source "$root/tests/cluster/report.sh"
export TPURT_HEARTBEAT_INTERVAL_MS=200 TPURT_HEARTBEAT_TIMEOUT_MS=3000
export TPURT_INIT_TIMEOUT_MS=15000 TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS=5000
unset TF_CONFIG SLURM_JOB_ID OMPI_COMM_WORLD_SIZE DTENSOR_JOBS TPURT_CLUSTER_TOKEN TPURT_TRANSPORT
ROUNDS=${ROUNDS:-20}
TRANSPORTS=${TRANSPORTS:-tcp shm mpi}

# ---- Release and initialise again ------------------------------------------------
rounds_ok() {  # rounds_ok N OUTPUT: tasks 0..N-1 each said "rounds ok"
  local i
  for ((i = 0; i < $1; i++)); do grep -q "task $i: rounds ok ($ROUNDS rounds)" <<<"$2" || return 1; done
}
for transport in $TRANSPORTS; do
  start=$SECONDS
  if [ "$transport" = mpi ]; then
    plugin=$BUILD/lib/libtpurt_mpi.so
    if [ -n "${SANITIZE:-}" ]; then
      echo "check_cluster_lifetime: skipped the MPI rounds: SANITIZE=$SANITIZE (see check_mpi.sh)"; continue
    fi
    if ! command -v mpirun >/dev/null 2>&1; then
      echo "check_cluster_lifetime: skipped the MPI rounds: mpirun not found"; continue
    fi
    if [ ! -e "$plugin" ]; then
      echo "check_cluster_lifetime: skipped the MPI rounds: $plugin is not built (make mpi)"; continue
    fi
    case $plugin in /*) ;; *) plugin=$root/$plugin ;; esac
    base=$(port_base 2) || exit 1
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
          TPURT_TRANSPORT=mpi TPURT_MPI_PLUGIN=$plugin TPURT_NUM_CORES=1 \
          TPURT_TASK_ADDRESSES=127.0.0.1:$base,127.0.0.1:$((base + 1)) TPURT_COORDINATOR_ADDRESS=127.0.0.1:$base \
          timeout -k 5 150 mpirun --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
          --mca oob_tcp_if_include lo -n 2 "$worker" rounds "$ROUNDS" 2>&1)
  else
    out=$(TPURT_TRANSPORT=$transport timeout -k 5 150 "$tpurt" launch -n 2 --cores-per-task 2 -- \
          "$worker" rounds "$ROUNDS" 2>&1)
  fi
  rc=$?
  if [ $rc -eq 0 ] && rounds_ok 2 "$out"; then
    ok "$transport: a 2-task system released and initialised again $ROUNDS times in the same processes, a checked step each round, either task releasing first ($((SECONDS - start)) s)"
  else bad "$transport: release and initialise again, $ROUNDS rounds (exit $rc)" "$out"; fi
done

# ---- A flood from the tasks' own address ------------------------------------------
# flood PORT SECONDS: 3,000 connections from 127.0.0.1 that never send a byte, held
# and reopened as the server closes them (tests/cluster/flood.py); sets flooder.
flood() {
  python3 tests/cluster/flood.py "$1" "$2" 127.0.0.1 3000 >"$BUILD/lifetime_flood.log" 2>&1 &
  flooder=$!
}
flood_done() {
  wait "$flooder"
  flood_out=$(cat "$BUILD/lifetime_flood.log")
  rm -f "$BUILD/lifetime_flood.log"
}

# Four tasks joining while the flood runs: each within its 8 s init timeout (with a
# token, so that every connection has a handshake to do), then a checked step.
base=$(port_base 4) || exit 1
flood $base 14
sleep 2
start=$SECONDS
out=$(TPURT_CLUSTER_TOKEN=secret TPURT_INIT_TIMEOUT_MS=8000 timeout -k 5 60 "$tpurt" launch -n 4 \
      --cores-per-task 1 --port-base $base -- "$worker" step 2>&1)
rc=$?
took=$((SECONDS - start))
flood_done
if [ $rc -eq 0 ] && [ "$(grep -c 'task [0-3]: step ok' <<<"$out")" = 4 ] &&
   grep -q '^flood: [0-9]* connections' <<<"$flood_out"; then
  ok "four tasks join within their 8 s init timeout and run a step under a flood from 127.0.0.1 (${flood_out#flood: }; $took s)"
else bad "four tasks under a flood from 127.0.0.1 (exit $rc, $took s)" "$out
$flood_out"; fi

# Task 0 running (waiting for task 1) when the flood begins; task 1 joins 3 s into it
# with a 12 s init timeout.
base=$(port_base 2) || exit 1
jobs=127.0.0.1:$base,127.0.0.1:$((base + 1))
(DTENSOR_JOBS=$jobs DTENSOR_CLIENT_ID=0 TPURT_NUM_CORES=1 TPURT_INIT_TIMEOUT_MS=40000 \
   exec timeout -k 5 60 "$worker" step >"$BUILD/lifetime_task0.log" 2>&1) &
task0=$!
sleep 1
flood $base 20
sleep 3
out1=$(DTENSOR_JOBS=$jobs DTENSOR_CLIENT_ID=1 TPURT_NUM_CORES=1 TPURT_INIT_TIMEOUT_MS=12000 \
       timeout -k 5 60 "$worker" step 2>&1)
rc1=$?
wait $task0
rc0=$?
flood_done
out="$(cat "$BUILD/lifetime_task0.log")
$out1"
rm -f "$BUILD/lifetime_task0.log"
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && grep -q 'task 0: step ok' <<<"$out" && grep -q 'task 1: step ok' <<<"$out"; then
  ok "a task joins a running task 0 within its 12 s init timeout under a flood from 127.0.0.1 ($(grep -o 'task 1: init took [0-9.]* s' <<<"$out"); ${flood_out#flood: })"
else bad "a task joining a running task 0 under a flood from 127.0.0.1 (exits $rc0 $rc1)" "$out
$flood_out"; fi

echo "cluster_lifetime: $passed passed, $failed failed"
[ $failed -eq 0 ]
