#!/usr/bin/env bash
# Multi-process tests on loopback: tasks started by tpurt launch (and, for the faults,
# also by hand with DTensor's environment, where no launcher ends the others) join one
# TPU system; every collective across them (and, with replicas of several cores, in
# every group mode, bit for bit one process's), the key-value store and barriers, and the
# faults: a task killed, stopped, skipping a collective, failing; steps on the tasks'
# own threads (caller_threads), a core never joined; wrong tokens;
# garbage on the ports. The suite runs over each data plane (TRANSPORTS, default
# "tcp shm": TPURT_TRANSPORT for every task). Every run is bounded by `timeout`.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
tpurt=$BUILD/bin/tpurt
worker=$BUILD/tests/cluster_worker
[ -x "$tpurt" ] && [ -x "$worker" ] || { echo "check_cluster: build $tpurt and $worker first" >&2; exit 1; }
source "$root/tests/cluster/report.sh"
# Faults end within seconds, not the defaults' minutes.
export TPURT_HEARTBEAT_INTERVAL_MS=200 TPURT_HEARTBEAT_TIMEOUT_MS=3000
export TPURT_INIT_TIMEOUT_MS=30000 TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS=5000
unset TF_CONFIG SLURM_JOB_ID OMPI_COMM_WORLD_SIZE DTENSOR_JOBS TPURT_CLUSTER_TOKEN TPURT_TRANSPORT
TRANSPORTS=${TRANSPORTS:-tcp shm}
# Shared-memory segments are memfds: nothing may appear in /dev/shm, whatever ends a task.
shm_before=$(ls -A /dev/shm 2>/dev/null | sort)

# every_task_says N TEXT OUTPUT: each of tasks 0..N-1 printed "[i] task i: TEXT".
every_task_says() {
  local n=$1 text=$2 out=$3 i
  for ((i = 0; i < n; i++)); do
    grep -qF "[$i] task $i: $text" <<<"$out" || return 1
  done
}

# by_hand N BOUND SCENARIO [ARG]: starts N tasks, each the worker itself (exec: kill -9
# reaches it), all killed after BOUND seconds should they not end; sets pids.
by_hand() {
  local n=$1 bound=$2 base jobs= i
  base=$(port_base "$n") || return 1
  shift 2
  for ((i = 0; i < n; i++)); do jobs+=${jobs:+,}127.0.0.1:$((base + i)); done
  pids=()
  for ((i = 0; i < n; i++)); do
    (DTENSOR_JOBS=$jobs DTENSOR_CLIENT_ID=$i TPURT_NUM_CORES=1 exec "$worker" "$@" \
       >"$BUILD/byhand.$i.log" 2>&1) &
    pids+=($!)
  done
  (sleep "$bound"; kill -9 "${pids[@]}" 2>/dev/null) &
  watchdog=$!
}
# by_hand_wait I...: waits for tasks I... (their exits in rcs), then ends the rest and
# the watchdog; out: every task's log.
by_hand_wait() {
  local i
  rcs=()
  for i in "$@"; do wait "${pids[$i]}" 2>/dev/null; rcs+=($?); done
  kill -9 "${pids[@]}" 2>/dev/null
  for i in "${!pids[@]}"; do wait "${pids[$i]}" 2>/dev/null; done
  kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
  out=$(cat "$BUILD"/byhand.*.log)
  rm -f "$BUILD"/byhand.*.log
}

# Model parallelism: one process of 8 cores gives the reference digests of every
# participant's results, which the runs across tasks below must match bit for bit.
model_parallel_reference "$worker"
if [ -n "$mp_reference" ]; then
  ok "replicas of 2 and 4 cores in one process of 8: every group mode x every collective, partitioned inputs and outputs, against references"
else bad "replicas of 2 and 4 cores in one process of 8" "$mp_reference_out"; fi
# Embeddings: one process of 4 cores gives the reference digests of every activation
# and, at the end, of every shard's rows and slots, per sharding strategy.
embedding_reference "$worker"
if [ -n "${emb_reference[div]}" ] && [ -n "${emb_reference[mod]}" ]; then
  ok "embedding tables sharded DIV_DEFAULT and MOD over one process of 4 cores: steps, failing steps that change no row"
else bad "embedding tables in one process of 4 cores" "$emb_reference_out"; fi

for TPURT_TRANSPORT in $TRANSPORTS; do
  export TPURT_TRANSPORT
  # Replicas of 2 and 4 cores over 2 tasks of 4 (a replica's cores on both tasks, or
  # on one): every group mode x every collective, a partitioned input and outputs
  # (assembled from tiles on both tasks), against references, and every result bit
  # for bit one process's.
  out=$(timeout 180 "$tpurt" launch -n 2 --cores-per-task 4 -- "$worker" model_parallel 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && every_task_says 2 "model_parallel ok" "$out" && [ -n "$mp_reference" ] &&
     [ "$(model_parallel_digests "$out")" = "$mp_reference" ]; then
    ok "[$TPURT_TRANSPORT] replicas of 2 and 4 cores across 2 tasks: every group mode x every collective, partitioned inputs and outputs, bit for bit one process's"
  else bad "[$TPURT_TRANSPORT] replicas of 2 and 4 cores across 2 tasks (exit $rc)" "$out"; fi
  # Embedding tables sharded over 2 tasks of 2 cores and 4 of 1, DIV_DEFAULT and MOD:
  # every replica's activations at every step and every task's rows and slots at the
  # end, bit for bit one process's; a replica failing after its gradients, an id out of
  # range, and a step without a computation on task 1: the named errors, no row changed.
  # (Each run takes about a second.)
  for shape in "2 2" "4 1"; do
    set -- $shape
    for strategy in div mod; do
      out=$(timeout 120 "$tpurt" launch -n "$1" --cores-per-task "$2" -- "$worker" embedding $strategy 2>&1)
      rc=$?
      if embedding_run_ok "$1" $strategy; then
        ok "[$TPURT_TRANSPORT] embedding tables sharded $strategy over $1 tasks of $2 cores: activations, rows and slots bit for bit one process's; failing steps change no row on any task"
      else bad "[$TPURT_TRANSPORT] embedding tables sharded $strategy over $1 tasks of $2 cores (exit $rc)" "$out"; fi
    done
  done
  # A core on task 1 skips a cross-partition collective of its replica's cores on both
  # tasks, then calls it in another group mode, then all of task 1's cores do: both
  # tasks name "replica 1 core 1", or the other task by its cores; each next step runs.
  out=$(timeout 120 "$tpurt" launch -n 2 --cores-per-task 4 -- "$worker" model_parallel_skip 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && every_task_says 2 "model_parallel_skip ok" "$out" &&
     [ "$(grep -c 'task [01]: model_parallel_skip skip: FAILED_PRECONDITION: .*replica 1 core 1 finished' <<<"$out")" = 2 ]; then
    ok "[$TPURT_TRANSPORT] a core on task 1 skipping a collective, or in another group mode: both tasks name it (replica 1 core 1)"
  else bad "[$TPURT_TRANSPORT] a core on task 1 skipping a collective (exit $rc)" "$out"; fi

  # Steps on the tasks' own threads (caller_threads, tpu_step_join / tpu_step_leave):
  # checked sums; then task V's last core is never joined: every task names its replica
  # (TPU_DEADLINE_EXCEEDED; V's deadline 1 s, the other's 5 s, so that V's word comes
  # first; when V's other core's collective times out before V gives up on the join,
  # that timeout, "waiting for replicas [R]", is the step's verdict on both tasks);
  # then steps run again with every core joined.
  for victim in 0 1; do
    out=$(timeout 120 "$tpurt" launch -n 2 --cores-per-task 2 -- "$worker" caller_threads $victim 2>&1)
    rc=$?
    replica=$((2 * victim + 1))
    if [ $rc -eq 0 ] && every_task_says 2 "caller_threads ok" "$out" &&
       [ "$(grep -c "task [01]: caller_threads unjoined core 1 of task $victim: DEADLINE_EXCEEDED after [0-9.]* s: .*\(replica $replica (core 1) never started\|waiting for replicas \[$replica\]\)" <<<"$out")" = 2 ]; then
      ok "[$TPURT_TRANSPORT] steps on the tasks' own threads across 2 tasks; task $victim's core never joined: both tasks name replica $replica, then steps run again"
    else bad "[$TPURT_TRANSPORT] steps on the tasks' own threads, task $victim's core never joined (exit $rc)" "$out"; fi
  done

  for shape in "2 2" "3 2" "4 2" "2 4"; do
    set -- $shape
    out=$(timeout 180 "$tpurt" launch -n "$1" --cores-per-task "$2" -- "$worker" collectives 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && every_task_says "$1" "collectives ok" "$out" &&
     every_task_says "$1" "transport $TPURT_TRANSPORT (TPURT_TRANSPORT=$TPURT_TRANSPORT)" "$out"; then
      ok "[$TPURT_TRANSPORT] every collective across $1 tasks of $2 cores, same topology bytes everywhere"
    else
      bad "[$TPURT_TRANSPORT] collectives across $1 tasks of $2 cores (exit $rc)" "$out"
    fi
  done

  out=$(timeout 120 "$tpurt" launch -n 3 --cores-per-task 1 -- "$worker" kv 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && every_task_says 3 "kv ok" "$out"; then ok "[$TPURT_TRANSPORT] key-value store and barriers across 3 tasks"
  else bad "[$TPURT_TRANSPORT] key-value store and barriers (exit $rc)" "$out"; fi

  # Infeed and outfeed of every replica: each task feeds its own replicas; another
  # task's replica is TPU_INVALID_ARGUMENT naming it and its task, on both queues.
  for shape in "2 2" "4 1"; do
    set -- $shape
    out=$(timeout 120 "$tpurt" launch -n "$1" --cores-per-task "$2" -- "$worker" feed 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && every_task_says "$1" "feed ok" "$out" &&
       [ "$(grep -c 'task [0-9]*: \(infeed enqueue\|outfeed dequeue\) for replica [0-9]*: INVALID_ARGUMENT: .*replica [0-9]* runs on task [0-9]*' <<<"$out")" = $((2 * $1)) ]; then
      ok "[$TPURT_TRANSPORT] infeed and outfeed across $1 tasks of $2 cores: each task feeds its own replicas, another's is refused naming it"
    else bad "[$TPURT_TRANSPORT] infeed and outfeed across $1 tasks of $2 cores (exit $rc)" "$out"; fi
  done

  # An infeed queue with replicas of 2 cores whose logical core 1 runs on the other
  # task: every core gets its piece of the tuple (TensorFlow's InfeedQueue sharding).
  out=$(timeout 120 "$tpurt" launch -n 2 --cores-per-task 2 -- "$worker" feed_cores 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && every_task_says 2 "feed_cores ok" "$out" &&
     [ "$(grep -c 'replica [0-9] core [0-9]: piece ok' <<<"$out")" = 4 ]; then
    ok "[$TPURT_TRANSPORT] infeed with replicas of 2 cores split over 2 tasks: each core gets its piece"
  else bad "[$TPURT_TRANSPORT] infeed with replicas of 2 cores split over 2 tasks (exit $rc)" "$out"; fi

  out=$(timeout 120 "$tpurt" launch -n 3 --cores-per-task 2 -- "$worker" fail 1 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && every_task_says 3 "fail ok" "$out"; then
    ok "[$TPURT_TRANSPORT] a replica's failure on task 1 fails the step on every task with its error; the next step runs"
  else bad "[$TPURT_TRANSPORT] a failing replica (exit $rc)" "$out"; fi

  out=$(timeout 120 "$tpurt" launch -n 2 --cores-per-task 2 -- "$worker" skip 1 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && every_task_says 2 "skip ok" "$out" && grep -q 'FAILED_PRECONDITION.*task 1' <<<"$out"; then
    ok "[$TPURT_TRANSPORT] task 1 skipping a collective is named at once (TPU_FAILED_PRECONDITION)"
  else bad "[$TPURT_TRANSPORT] a skipped collective (exit $rc)" "$out"; fi

  # Task 1's replicas call another collective: an all-gather, or an all-reduce with MAX
  # (the same sizes as the others' SUM). Every task gets TPU_INVALID_ARGUMENT, the
  # others naming task 1.
  for other in gather max; do
    out=$(TEST_MISMATCH=$other timeout 120 "$tpurt" launch -n 3 --cores-per-task 1 -- "$worker" mismatch 1 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && every_task_says 3 "mismatch ok" "$out" &&
       [ "$(grep -c 'task [02]: mismatch of task 1: INVALID_ARGUMENT.*task 1' <<<"$out")" = 2 ]; then
      ok "[$TPURT_TRANSPORT] task 1 in another collective ($other): TPU_INVALID_ARGUMENT on every task, naming it"
    else bad "[$TPURT_TRANSPORT] task 1 in another collective ($other) (exit $rc)" "$out"; fi
  done

  out=$(timeout 120 "$tpurt" launch --keep-going -n 3 --cores-per-task 1 -- "$worker" kill 2 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && every_task_says 2 "kill ok" "$out" && grep -q 'task 2.*SIGKILL' <<<"$out"; then
    ok "[$TPURT_TRANSPORT] kill -9 of task 2 in a step: tasks 0 and 1 get TPU_UNAVAILABLE naming it and shut down"
  else bad "[$TPURT_TRANSPORT] kill -9 of a task (exit $rc)" "$out"; fi

  # kill -9 of task 0 (which hosts the service) and of a middle task, KILL_TRIALS times
  # each: every survivor names the killed task, with TPU_UNAVAILABLE, never a survivor
  # that left only because of it.
  for victim in 0 2; do
    failures=0
    for ((trial = 0; trial < ${KILL_TRIALS:-10}; trial++)); do
      out=$(timeout 60 "$tpurt" launch --keep-going -n 4 --cores-per-task 1 -- "$worker" kill $victim 2>&1)
      survivors=$(grep -c "task [0-3]: kill ok" <<<"$out")
      if [ "$survivors" != 3 ] || grep "kill of task $victim:" <<<"$out" | grep -qv "UNAVAILABLE.*task $victim"; then
        failures=$((failures + 1))
        last=$out
      fi
    done
    if [ $failures -eq 0 ]; then
      ok "[$TPURT_TRANSPORT] kill -9 of task $victim of 4, ${KILL_TRIALS:-10} times: every survivor reports TPU_UNAVAILABLE naming task $victim"
    else bad "[$TPURT_TRANSPORT] kill -9 of task $victim of 4: $failures of ${KILL_TRIALS:-10} trials" "$last"; fi
  done

  # A task that shuts down instead of the step: the others are told at once, not at the
  # shutdown barrier's 60 s (the timeout below is shorter).
  out=$(TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS=60000 timeout 40 "$tpurt" launch -n 4 --cores-per-task 1 -- "$worker" quit 1 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && every_task_says 4 "quit ok" "$out" &&
     [ "$(grep -c 'quit of task 1: FAILED_PRECONDITION.*task 1 shut down' <<<"$out")" = 3 ]; then
    ok "[$TPURT_TRANSPORT] task 1 shutting down while the others are in a step: TPU_FAILED_PRECONDITION naming it, at once"
  else bad "[$TPURT_TRANSPORT] a task shutting down during the others' step (exit $rc)" "$out"; fi

  out=$(TPURT_HEARTBEAT_TIMEOUT_MS=30000 TEST_COLLECTIVE_TIMEOUT_MS=2000 \
        timeout 120 "$tpurt" launch --keep-going --timeout 25 -n 3 --cores-per-task 1 -- "$worker" stop 2 2>&1)
  rc=$?
  if every_task_says 2 "stop ok" "$out" && grep -q 'DEADLINE_EXCEEDED.*task 2' <<<"$out"; then
    ok "[$TPURT_TRANSPORT] SIGSTOP of task 2: tasks 0 and 1 get TPU_DEADLINE_EXCEEDED naming it"
  else bad "[$TPURT_TRANSPORT] SIGSTOP of a task (exit $rc)" "$out"; fi

  # Started by hand with DTensor's environment (as Slurm, Kubernetes or a shell would):
  # nothing ends the others when one dies; they must notice by themselves.
  by_hand 3 60 soak 100000
  sleep 2
  kill -9 "${pids[2]}" 2>/dev/null; wait "${pids[2]}" 2>/dev/null
  by_hand_wait 0 1
  if [ "${rcs[0]}" = 1 ] && [ "${rcs[1]}" = 1 ] &&
     [ "$(grep -c 'UNAVAILABLE.*task 2' <<<"$out")" -ge 2 ]; then
    ok "[$TPURT_TRANSPORT] tasks started by hand notice task 2's kill -9 by themselves (TPU_UNAVAILABLE naming it)"
  else bad "[$TPURT_TRANSPORT] tasks started by hand, one killed (exits ${rcs[*]})" "$out"; fi

  saved_timeout=$TPURT_HEARTBEAT_TIMEOUT_MS
  export TPURT_HEARTBEAT_TIMEOUT_MS=30000 TEST_COLLECTIVE_TIMEOUT_MS=2000
  by_hand 3 40 stop 2
  by_hand_wait 0 1
  export TPURT_HEARTBEAT_TIMEOUT_MS=$saved_timeout
  unset TEST_COLLECTIVE_TIMEOUT_MS
  if [ "${rcs[*]}" = "0 0" ] && [ "$(grep -c 'DEADLINE_EXCEEDED.*task 2' <<<"$out")" -ge 2 ]; then
    ok "[$TPURT_TRANSPORT] tasks started by hand: SIGSTOP of task 2 gives the others TPU_DEADLINE_EXCEEDED naming it"
  else bad "[$TPURT_TRANSPORT] tasks started by hand, one stopped (exits ${rcs[*]})" "$out"; fi

  by_hand 2 60 skip 1
  by_hand_wait 0 1
  if [ "${rcs[*]}" = "0 0" ] && grep -q 'FAILED_PRECONDITION.*task 1' <<<"$out"; then
    ok "[$TPURT_TRANSPORT] tasks started by hand: task 1 skipping a collective is named at once (TPU_FAILED_PRECONDITION)"
  else bad "[$TPURT_TRANSPORT] tasks started by hand, one skipping a collective (exits ${rcs[*]})" "$out"; fi
  rm -f "$BUILD"/byhand.*.log "$BUILD/garbage.log"

  # The demo across 4 tasks converges to the closed form, as in one process.
  out=$(timeout 180 "$tpurt" launch -n 4 --cores-per-task 2 -- "$tpurt" demo --check 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c 'demo: OK' <<<"$out")" = 4 ] &&
     [ "$(grep 'max |diff|' <<<"$out" | sed 's/^\[[0-9]*\] //' | sort -u | wc -l)" = 1 ]; then
    ok "[$TPURT_TRANSPORT] tpurt launch -n 4 -- tpurt demo --check: every task reaches the same answer"
  else bad "[$TPURT_TRANSPORT] the demo across 4 tasks (exit $rc)" "$out"; fi

done
unset TPURT_TRANSPORT

# The data plane is one choice for all: tasks asking for different ones, or for a
# word that is none, are refused at once, naming the values.
out=$(timeout 60 "$tpurt" launch -n 2 --cores-per-task 1 -- \
      sh -c "if [ \"\$DTENSOR_CLIENT_ID\" = 1 ]; then export TPURT_TRANSPORT=tcp; else export TPURT_TRANSPORT=shm; fi; exec $worker init" 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q 'init: INVALID_ARGUMENT:.*task [01] has TPURT_TRANSPORT=[a-z]* but task [01] has [a-z]*' <<<"$out"; then
  ok "tasks asking for different transports get TPU_INVALID_ARGUMENT naming both"
else bad "tasks asking for different transports (exit $rc)" "$out"; fi
out=$(TPURT_TRANSPORT=carrier-pigeon timeout 60 "$tpurt" launch -n 2 --cores-per-task 1 -- "$worker" init 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q "init: INVALID_ARGUMENT.*TPURT_TRANSPORT='carrier-pigeon'" <<<"$out"; then
  ok "TPURT_TRANSPORT=carrier-pigeon is refused, naming the value"
else bad "a transport that does not exist (exit $rc)" "$out"; fi

# Tokens: one task with a wrong token, one without; then all with the right one.
for case in wrong missing; do
  if [ $case = wrong ]; then set_token='export TPURT_CLUSTER_TOKEN=wrong'; else set_token='unset TPURT_CLUSTER_TOKEN'; fi
  out=$(TPURT_CLUSTER_TOKEN=secret timeout 60 "$tpurt" launch -n 3 --cores-per-task 1 -- \
        sh -c "if [ \"\$DTENSOR_CLIENT_ID\" = 1 ]; then $set_token; fi; exec $worker init" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && grep -q '\[1\] init: UNAUTHENTICATED' <<<"$out"; then
    ok "a task with a $case token gets TPU_UNAUTHENTICATED"
  else bad "a task with a $case token (exit $rc)" "$out"; fi
done
out=$(TPURT_CLUSTER_TOKEN=secret timeout 60 "$tpurt" launch -n 3 --cores-per-task 1 -- "$worker" init 2>&1)
rc=$?
if [ $rc -eq 0 ] && every_task_says 3 "init ok" "$out" &&
   every_task_says 3 "transport shm (every task runs on this host)" "$out"; then
  ok "three tasks with the same token join, over shared memory (chosen: one host)"
else bad "three tasks with one token (exit $rc)" "$out"; fi

# Two processes with task id 1: the second is told it is a duplicate, naming both
# hosts; task 0 and the first task 1 form the cluster.
base=$(port_base 2) || exit 1
jobs=127.0.0.1:$base,127.0.0.1:$((base + 1))
pids=()
for id in 0 1 1; do
  (DTENSOR_JOBS=$jobs DTENSOR_CLIENT_ID=$id TPURT_NUM_CORES=1 exec timeout 60 "$worker" soak 100 \
     >"$BUILD/dup.${#pids[@]}.log" 2>&1) &
  pids+=($!)
  sleep 0.2
done
for p in "${pids[@]}"; do wait "$p"; done
out=$(cat "$BUILD"/dup.*.log)
rm -f "$BUILD"/dup.*.log
host=$(hostname)
if grep -q "init: ALREADY_EXISTS: duplicate task id 1: task 1 is already registered by a process on host $host .*this one runs on host $host" <<<"$out" &&
   [ "$(grep -c 'task [01]: soak ok' <<<"$out")" = 2 ]; then
  ok "two processes with task id 1: the second gets TPU_ALREADY_EXISTS 'duplicate task id 1' naming both hosts"
else bad "two processes with one task id" "$out"; fi

# A flood of connections that never authenticate (3,000 from 127.0.0.2-9, reopened as
# the server closes them, for 10 s) against a token-protected task 0 while four tasks
# join: they join within their (shorter) init timeout all the same.
base=$(port_base 4) || exit 1
python3 tests/cluster/flood.py $base 10 >"$BUILD/flood.log" 2>&1 &
flooder=$!
sleep 1
out=$(TPURT_CLUSTER_TOKEN=secret TPURT_INIT_TIMEOUT_MS=8000 timeout 60 "$tpurt" launch -n 4 --cores-per-task 1 \
      --port-base $base -- "$worker" init 2>&1)
rc=$?
wait $flooder
flood=$(cat "$BUILD/flood.log")
rm -f "$BUILD/flood.log"
if [ $rc -eq 0 ] && every_task_says 4 "init ok" "$out" && grep -q '^flood: [0-9]* connections' <<<"$flood"; then
  ok "four tasks join within 8 s under a flood of unauthenticated connections (${flood#flood: })"
else bad "four tasks under a flood of unauthenticated connections (exit $rc)" "$out
$flood"; fi

# Garbage on every port while the cluster works: random bytes, a truncated frame, an
# oversized length. Each connection is dropped; the steps go on.
base=$(port_base 2) || exit 1
timeout 120 "$tpurt" launch -n 2 --cores-per-task 1 --port-base $base -- "$worker" soak 150 >"$BUILD/garbage.log" 2>&1 &
launcher=$!
sleep 1
python3 - "$base" <<'PY'
import os, socket, struct, sys, time
base = int(sys.argv[1])
def header(type_, length):
    return struct.pack('<IHHIIQQQQQ', 0x54505554, 1, type_, 0, 0, 0, 0, 0, 0, length)
payloads = [os.urandom(4096), header(1, 100)[:30], header(1, 1 << 40), header(2, 1 << 62),
            header(1, 64) + os.urandom(64), b'GET / HTTP/1.0\r\n\r\n']
for port in (base, base + 1):
    for p in payloads:
        try:
            s = socket.create_connection(('127.0.0.1', port), timeout=2)
            s.sendall(p)
            s.settimeout(3)
            try:
                s.recv(100)
            except OSError:
                pass
            s.close()
        except OSError:
            pass
PY
wait $launcher
rc=$?
out=$(cat "$BUILD/garbage.log")
if [ $rc -eq 0 ] && every_task_says 2 "soak ok" "$out"; then
  ok "random bytes, a truncated frame and oversized lengths on every port: dropped, the steps go on"
else bad "garbage on the ports (exit $rc)" "$out"; fi

# Hosts that are not localhost (network namespaces on a bridge): tests/check_hosts.sh.

shm_after=$(ls -A /dev/shm 2>/dev/null | sort)
# Open MPI's segments (vader_segment.*) and mono's (mono.*) come and go with other programs on the machine.
new_entries=$(comm -13 <(printf '%s\n' "$shm_before") <(printf '%s\n' "$shm_after") | grep -v -e '^$' -e '^vader_segment\.' -e '^mono\.')
if [ -z "$new_entries" ]; then ok "nothing left in /dev/shm by any run, kill -9 included"
else bad "entries left in /dev/shm" "$new_entries"; fi

echo "cluster: $passed passed, $failed failed"
[ $failed -eq 0 ]
