#!/usr/bin/env bash
# Whole-system checkpoints across tasks (issue 31 part 1), on loopback under tpurt
# launch, over each data plane (TRANSPORTS, default "tcp shm"): 4 tasks of 2 cores save
# two tables (DIV), then the checkpoint restores onto 3 tasks of 2 cores (MOD) and onto
# 1 task of 8 cores, every row on its new owner bit for bit and every row checked once
# (tests/cluster/checkpoint_worker.c checks the rows; this script sums them). Then a
# flipped byte in one task's shard file is refused on every task with DATA_LOSS, and a
# task that stays away is named by the others' TPU_DEADLINE_EXCEEDED, no row changed;
# a save that a task misses or fails is named on every task and leaves no manifest.
# Every run is bounded by `timeout`.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
tpurt=$BUILD/bin/tpurt
worker=$BUILD/tests/checkpoint_worker
[ -x "$tpurt" ] && [ -x "$worker" ] || { echo "check_checkpoint_cluster: build $tpurt and $worker first" >&2; exit 1; }
source "$root/tests/cluster/report.sh"
export TPURT_HEARTBEAT_INTERVAL_MS=200 TPURT_HEARTBEAT_TIMEOUT_MS=3000
export TPURT_INIT_TIMEOUT_MS=30000 TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS=10000
unset TF_CONFIG SLURM_JOB_ID OMPI_COMM_WORLD_SIZE DTENSOR_JOBS TPURT_CLUSTER_TOKEN TPURT_TRANSPORT
TRANSPORTS=${TRANSPORTS:-tcp shm}
ROWS=1037 # big (1000) + small (37): each held by exactly one task
dir=$(mktemp -d "${TMPDIR:-/tmp}/tpurt-ckpt-cluster.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# run N CORES MODE SHARDING ARG: every task must print "MODE ok rows=R"; sets sum to
# the sum of R (-1 if a task did not, or the launch failed) and last_out to the output.
run() {
  local n=$1 cores=$2 mode=$3 sharding=$4 arg=$5 rc i r
  last_out=$(timeout 120 "$tpurt" launch -n "$n" --cores-per-task "$cores" -- "$worker" "$mode" "$dir/$T" "$sharding" "$arg" 2>&1)
  rc=$?
  sum=0
  for ((i = 0; i < n; i++)); do
    r=$(grep -oE "^\[$i\] task $i: $mode ok rows=[0-9]+" <<<"$last_out" | sed 's/.*rows=//')
    [ -n "$r" ] || { sum=-1; return; }
    sum=$((sum + r))
  done
  [ $rc -eq 0 ] || sum=-1
}

for TPURT_TRANSPORT in $TRANSPORTS; do
  export TPURT_TRANSPORT
  T=$TPURT_TRANSPORT
  run 4 2 save DIV_DEFAULT 40
  if [ "$sum" = "$ROWS" ] && [ -f "$dir/$T/ckpt-40/manifest.json" ]; then
    ok "[$T] 4 tasks x 2 cores save step 40: every task's shards and the manifest"
  else bad "[$T] 4 x 2 save (rows $sum)" "$last_out"; fi
  run 3 2 restore MOD 40
  if [ "$sum" = "$ROWS" ]; then ok "[$T] 4 x 2 (DIV) -> 3 x 2 (MOD): all $ROWS rows and slots on their new owners, bit for bit"
  else bad "[$T] 4 x 2 -> 3 x 2 restore (rows $sum)" "$last_out"; fi
  run 1 8 restore DIV_DEFAULT 40
  if [ "$sum" = "$ROWS" ]; then ok "[$T] 4 x 2 -> 1 x 8: all $ROWS rows and slots, bit for bit"
  else bad "[$T] 4 x 2 -> 1 x 8 restore (rows $sum)" "$last_out"; fi

  # A task that stays away is named by every other task.
  run 3 2 skip MOD 2
  if [ "$sum" = "$ROWS" ] && [ "$(grep -c 'refused: DEADLINE_EXCEEDED: .*task 2' <<<"$last_out")" = 2 ]; then
    ok "[$T] restore on 3 tasks with task 2 away: DEADLINE_EXCEEDED naming task 2 on the others, no row changed"
  else bad "[$T] restore with task 2 away (rows $sum)" "$last_out"; fi

  # A task that stays away from a save is named on every task; no manifest is written.
  run 3 2 skip-save MOD 1
  if [ "$(grep -c 'refused: DEADLINE_EXCEEDED: .*task 1 did not write its shards' <<<"$last_out")" = 2 ] &&
    [ ! -e "$dir/$T/ckpt-50/manifest.json" ]; then
    ok "[$T] save on 3 tasks with task 1 away: DEADLINE_EXCEEDED naming task 1 on the others, no manifest"
  else bad "[$T] save with task 1 away" "$last_out"; fi
  # Task 1 cannot create its shard file (a directory holds its temporary name): every task
  # fails naming task 1 and the file (UNAVAILABLE = 14); still no manifest.
  mkdir -p "$dir/$T/ckpt-50/table-0-task-1.bin.tmp-1"
  run 3 2 save-refused MOD 14
  if [ "$(grep -c 'refused: UNAVAILABLE: .*cannot create .*table-0-task-1.bin.tmp-1' <<<"$last_out")" = 3 ] &&
    [ "$(grep -c 'refused: UNAVAILABLE: task 1: cannot create' <<<"$last_out")" = 2 ] &&
    [ ! -e "$dir/$T/ckpt-50/manifest.json" ]; then
    ok "[$T] a shard file task 1 cannot create: UNAVAILABLE naming task 1 and the file on every task, no manifest"
  else bad "[$T] a save that fails on task 1" "$last_out"; fi
  run 3 2 restore MOD 40
  if [ "$sum" = "$ROWS" ]; then ok "[$T] after the failed saves of step 50, step 40 is the newest and restores"
  else bad "[$T] restore after the failed saves (rows $sum)" "$last_out"; fi

  # One byte of task 1's shard of table 0 flipped: refused on every task (DATA_LOSS = 15).
  f=$dir/$T/ckpt-40/table-0-task-1.bin
  python3 - "$f" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(100); b = f.read(1); f.seek(100); f.write(bytes([b[0] ^ 1]))
PY
  run 3 2 refuse MOD 15
  if [ "$sum" = "$ROWS" ] && [ "$(grep -c 'refused: DATA_LOSS: .*table-0-task-1.bin has SHA-256' <<<"$last_out")" = 3 ]; then
    ok "[$T] a flipped byte in table-0-task-1.bin: DATA_LOSS naming it on all 3 tasks, no row changed"
  else bad "[$T] a flipped byte (rows $sum)" "$last_out"; fi
done

echo "check_checkpoint_cluster: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
