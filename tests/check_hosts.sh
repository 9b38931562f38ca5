#!/usr/bin/env bash
# Four hosts that are not localhost: network namespaces, each with one veth into a Linux
# bridge in a fifth namespace, all made here and removed on any exit (nothing touches
# the machine's own interfaces). Tasks are started by hand in them with DTensor's
# environment, as on real machines: the demo across 4 hosts, the CTR demo and every
# collective on 3 (two tasks on one), every collective on 2 hosts (over TCP; of two
# tasks each, shared memory within a host), shared memory refused across hosts, a
# kill -9 of a task (of task 0 too, which holds the service), an elastic restart by
# tpurt launch whose tasks are moved into the hosts (tests/check_elastic.sh has the
# launcher's rules), a host unplugged from the bridge (only the heartbeats can tell),
# and a token-protected join with a wrong and a missing token. Skipped with the reason
# where `ip netns` is not allowed. Every task is bounded (timeout), every wait polled a
# bounded time.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
BUILD=${BUILD:-build}
tpurt=$BUILD/bin/tpurt
worker=$BUILD/tests/cluster_worker
[ -x "$tpurt" ] && [ -x "$worker" ] || { echo "check_hosts: build $tpurt and $worker first" >&2; exit 1; }
source "$root/tests/cluster/report.sh"
# Faults end within seconds, not the defaults' minutes.
export TPURT_HEARTBEAT_INTERVAL_MS=200 TPURT_HEARTBEAT_TIMEOUT_MS=3000
export TPURT_INIT_TIMEOUT_MS=20000 TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS=5000
unset TF_CONFIG SLURM_JOB_ID OMPI_COMM_WORLD_SIZE DTENSOR_JOBS TPURT_CLUSTER_TOKEN TPURT_TRANSPORT
logs=$(mktemp -d)

# Namespaces are named after this script's pid; a run ended by SIGKILL (the test
# runner's last resort) cannot clean up, so each run first removes those of runs
# whose shell is gone, with whatever still runs in them.
prefix="tpurt-hosts-"
remove_netns() {
  local ns=$1 p
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
}
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${prefix}[0-9]*-"); do
  owner=${ns#"$prefix"}
  owner=${owner%%-*}
  kill -0 "$owner" 2>/dev/null || remove_netns "$ns"
done

bridge=$prefix$$-br
hosts=()
for i in 0 1 2 3; do hosts+=("$prefix$$-h$i"); done
cleanup() {
  local ns
  for ns in "${hosts[@]}" "$bridge"; do remove_netns "$ns"; done
  rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# The bridge's namespace, then each host: eth0 (10.77.0.(i+1)/24) whose peer, h<i>,
# is a port of the bridge.
make_hosts() {
  local i
  ip netns add "$bridge" || return 1
  ip -n "$bridge" link add br0 type bridge || return 1
  ip -n "$bridge" link set br0 up || return 1 # without STP its ports forward at once
  for i in 0 1 2 3; do
    ip netns add "${hosts[$i]}" || return 1
    ip -n "$bridge" link add "h$i" type veth peer name eth0 netns "${hosts[$i]}" || return 1
    ip -n "$bridge" link set "h$i" master br0 up || return 1
    ip -n "${hosts[$i]}" addr add "10.77.0.$((i + 1))/24" dev eth0 || return 1
    ip -n "${hosts[$i]}" link set eth0 up || return 1
    ip -n "${hosts[$i]}" link set lo up || return 1
  done
}
if ! reason=$(make_hosts 2>&1); then
  echo "check_hosts: skipped: cannot make network namespaces and a bridge here (needs root and ip netns): ${reason:-no detail}"
  exit 0
fi
# on_hosts HOSTS BOUND VARS PROG ARGS...: task i runs PROG ARGS in host HOSTS[i] (a
# list of host numbers, e.g. "0 1 2 3"), with VARS (VAR=VALUE ...), DTENSOR_JOBS of
# every task's 10.77.0.(host+1):port and its DTENSOR_CLIENT_ID; each is killed after
# BOUND seconds. Sets pids (the timeouts') and task_hosts.
on_hosts() {
  local list=$1 bound=$2 vars=$3 h i=0 port=29500 jobs=
  shift 3
  read -r -a task_hosts <<<"$list"
  for h in "${task_hosts[@]}"; do jobs+=${jobs:+,}10.77.0.$((h + 1)):$((port++)); done
  rm -f "$logs"/task.*.log
  pids=()
  for h in "${task_hosts[@]}"; do
    (exec env $vars DTENSOR_JOBS=$jobs DTENSOR_CLIENT_ID=$i \
       timeout -s KILL "$bound" ip netns exec "${hosts[$h]}" "$@" >"$logs/task.$i.log" 2>&1) &
    pids+=($!)
    i=$((i + 1))
  done
}
# on_hosts_wait: every task's exit in rcs, their logs (lines prefixed [i]) in out.
on_hosts_wait() {
  local i
  rcs=()
  for i in "${!pids[@]}"; do wait "${pids[$i]}" 2>/dev/null; rcs+=($?); done
  out=
  for i in "${!pids[@]}"; do out+=$(sed "s/^/[$i] /" "$logs/task.$i.log")$'\n'; done
}
# until_logs TEXT SECONDS: waits (polling) until every task's log holds TEXT.
until_logs() {
  local i deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    for i in "${!pids[@]}"; do grep -qF "$1" "$logs/task.$i.log" || { sleep 0.1; continue 2; }; done
    return 0
  done
  return 1
}
# all_ok SCENARIO: every task exited 0 and printed "task i: SCENARIO ok".
all_ok() {
  local i
  for i in "${!rcs[@]}"; do
    [ "${rcs[$i]}" = 0 ] && grep -q "^\[$i\] task $i: $1 ok" <<<"$out" || return 1
  done
}
# says I TEXT: task I printed "task I: TEXT...".
says() { grep -qF "[$1] task $1: $2" <<<"$out"; }
# ms: milliseconds of the clock, for the time a failure takes to be named.
ms() { date +%s%3N; }
# kill_host_tasks H: kill -9 of every process in host H (its task), from outside.
kill_host_tasks() {
  local p
  for p in $(ip netns pids "${hosts[$1]}"); do kill -9 "$p"; done
}

# The demo on 4 hosts of one task of 2 cores: data-parallel SGD, every gradient summed
# over TCP across the bridge; every task converges to the least-squares solution and
# prints the same distance.
on_hosts "0 1 2 3" 120 TPURT_NUM_CORES=2 "$tpurt" demo --check
on_hosts_wait
if [ "${rcs[*]}" = "0 0 0 0" ] && [ "$(grep -c 'demo: OK' <<<"$out")" = 4 ] &&
   [ "$(grep 'max |diff|' <<<"$out" | sed 's/^\[[0-9]*\] //' | sort -u | wc -l)" = 1 ]; then
  ok "tpurt demo --check on 4 hosts joined by a bridge: every task reaches the same answer"
else bad "the demo on 4 hosts (exits ${rcs[*]})" "$out"; fi

# The CTR demo with four tasks on three hosts (two on host 0: shared memory between
# them, TCP to the others): embedding tables sharded over every core, each task's rows,
# slots and dense weights against the same training on one core.
on_hosts "0 0 1 2" 120 TPURT_NUM_CORES=1 "$tpurt" demo --embedding
on_hosts_wait
if [ "${rcs[*]}" = "0 0 0 0" ] && [ "$(grep -c 'demo: OK' <<<"$out")" = 4 ]; then
  ok "tpurt demo --embedding on 3 hosts (two tasks on one): every task's rows, slots and weights match one core's"
else bad "the CTR demo on 3 hosts (exits ${rcs[*]})" "$out"; fi

# Every collective with hosts of unequal task counts (two tasks on host 0, one on each
# other): the tasks of host 0 have shared windows, the others none, and every task must
# still decide alike whether a reduction votes before its exchange.
on_hosts "0 0 1 2" 120 TPURT_NUM_CORES=1 "$worker" collectives
on_hosts_wait
if all_ok collectives && says 0 "transport shm+tcp (tasks 0, 1 share this host" &&
   says 3 "transport tcp (no other task runs on this host)"; then
  ok "4 tasks on 3 hosts (two on one): every collective, shared memory within the host and TCP across the bridge"
else bad "4 tasks on 3 hosts (exits ${rcs[*]})" "$out"; fi

# ... and task 3, alone on its host, skips an all-reduce of 400 KB: every task names it
# at once (TPU_FAILED_PRECONDITION), through shared memory and TCP alike.
on_hosts "0 0 1 2" 60 "TPURT_NUM_CORES=1 TEST_FAULT_ELEMENTS=100000" "$worker" skip 3
on_hosts_wait
if all_ok skip && [ "$(grep -c 'skip of task 3: FAILED_PRECONDITION .*task 3 (replica 3) finished the step without calling' <<<"$out")" = 4 ]; then
  ok "4 tasks on 3 hosts: task 3 skipping an all-reduce of 400 KB is named on every task (TPU_FAILED_PRECONDITION)"
else bad "4 tasks on 3 hosts, task 3 skipping a collective (exits ${rcs[*]})" "$out"; fi

# Two hosts of one task: every collective over TCP (chosen: another host). Two hosts
# of two tasks: shared memory within a host and TCP between, in one step. Shared
# memory asked for across hosts: refused by both, naming the other host.
on_hosts "0 1" 90 TPURT_NUM_CORES=2 "$worker" collectives
on_hosts_wait
if all_ok collectives && says 0 "transport tcp (no other task runs on this host)" &&
   says 1 "transport tcp (no other task runs on this host)"; then
  ok "two hosts: every collective, over TCP (chosen: another host)"
else bad "two hosts (exits ${rcs[*]})" "$out"; fi
on_hosts "0 0 1 1" 120 TPURT_NUM_CORES=2 "$worker" collectives
on_hosts_wait
if all_ok collectives && says 0 "transport shm+tcp (tasks 0, 1 share this host" &&
   says 3 "transport shm+tcp (tasks 2, 3 share this host"; then
  ok "two hosts of two tasks: every collective, shared memory within a host and TCP between"
else bad "two hosts of two tasks (exits ${rcs[*]})" "$out"; fi
on_hosts "0 1" 60 "TPURT_NUM_CORES=1 TPURT_TRANSPORT=shm" "$worker" init
on_hosts_wait
if [ "${rcs[*]}" = "3 3" ] && [ "$(grep -c 'init: INVALID_ARGUMENT.*TPURT_TRANSPORT=shm.*another host' <<<"$out")" = 2 ]; then
  ok "TPURT_TRANSPORT=shm across two hosts: both get TPU_INVALID_ARGUMENT naming the other host"
else bad "shm across two hosts (exits ${rcs[*]})" "$out"; fi

# kill -9 of one task from outside, while all four run steps: the survivors, who are on
# other hosts, end (exit 1) naming it with TPU_UNAVAILABLE, within 15 s of the kill.
# Task 0 holds the coordination service: its loss is named too.
for victim in 2 0; do
  on_hosts "0 1 2 3" 90 TPURT_NUM_CORES=1 "$worker" soak 100000
  if until_logs "transport tcp" 30; then
    killed_at=$(ms)
    kill_host_tasks "$victim"
    on_hosts_wait
    took=$(($(ms) - killed_at))
  else
    kill_host_tasks "$victim"
    on_hosts_wait
    took=never
  fi
  named=0 survivors=0
  for i in 0 1 2 3; do
    [ $i = $victim ] && continue
    survivors=$((survivors + 1))
    [ "${rcs[$i]}" = 1 ] && grep -q "^\[$i\] .*UNAVAILABLE.*task $victim" <<<"$out" && named=$((named + 1))
  done
  if [ "$took" != never ] && [ "$took" -le 15000 ] && [ "${rcs[$victim]}" = 137 ] && [ $named = $survivors ]; then
    ok "kill -9 of task $victim on its host: the 3 tasks on the other hosts end with TPU_UNAVAILABLE naming it, $took ms after the kill"
  else bad "kill -9 of task $victim on its host (exits ${rcs[*]}, ended after $took ms, $named of $survivors named it)" "$out"; fi
done

# Elastic restart across the hosts: tpurt launch -n 4 --min-tasks 3 --max-restarts 1
# runs the CTR demo with checkpoints; on_host.sh moves each task into its host (task i
# of 4 on host i; of 3, on hosts 0, 1 and 3), DTENSOR_JOBS' 127.0.0.1 made each task's
# address. Task 2 gets kill -9 once the checkpoint of step 40 is saved (of 400 steps: a
# faster machine is still training then): the launcher restarts the demo on 3 tasks,
# away from host 2, from the newest checkpoint, and every task's final check passes.
cat >"$logs/on_host.sh" <<'HOST'
#!/usr/bin/env bash
# on_host.sh PROG ARGS...: runs this launched task in its host's namespace.
set -u
hosts_var=HOSTS_OF_$TPURT_LAUNCH_TASKS
read -r -a map <<<"${!hosts_var}"
jobs= k=0
for address in ${DTENSOR_JOBS//,/ }; do
  jobs+=${jobs:+,}10.77.0.$((map[k] + 1)):${address##*:}
  k=$((k + 1))
done
echo "on host ${map[$DTENSOR_CLIENT_ID]}" >&2
DTENSOR_JOBS=$jobs exec ip netns exec "$NS_PREFIX${map[$DTENSOR_CLIENT_ID]}" "$@"
HOST
ck=$logs/ctr.ck
NS_PREFIX=$prefix$$-h HOSTS_OF_4="0 1 2 3" HOSTS_OF_3="0 1 3" timeout 150 "$tpurt" launch -n 4 \
  --cores-per-task 1 --min-tasks 3 --max-restarts 1 --checkpoint-dir "$ck" -- \
  bash "$logs/on_host.sh" "$tpurt" demo --embedding --batch 240 --steps 400 --checkpoint-every 20 \
  --checkpoint "$ck" >"$logs/elastic.out" 2>"$logs/elastic.err" &
launcher=$!
for ((i = 0; i < 600; i++)); do
  grep -q '^\[0\] demo: checkpoint of step 40 saved' "$logs/elastic.out" 2>/dev/null && break
  sleep 0.1
done
kill_host_tasks 2
wait $launcher
rc=$?
out=$(cat "$logs/elastic.out" "$logs/elastic.err")
restart=$(grep -o 'task 2 died (SIGKILL) at step [0-9]*; restarting on 3 tasks from the checkpoint of step [0-9]* (restart 1 of 1)' <<<"$out")
from=${restart##*checkpoint of step }
from=${from%% *}
if [ $rc -eq 0 ] && [ -n "$restart" ] && [ "$from" -ge 40 ] &&
   grep -q "^\[0\] demo: restored the checkpoint of step $from from " <<<"$out" &&
   grep -q '^\[2\] on host 3$' <<<"$out" && [ "$(grep -c '^\[[0-2]\] demo: OK$' <<<"$out")" = 3 ] &&
   [ "$(grep -c 'demo: OK$' <<<"$out")" = 3 ]; then
  ok "elastic: kill -9 of task 2 of 4 hosts in training; tpurt launch restarts the CTR demo on hosts 0, 1 and 3 from the checkpoint of step $from, every check passes ($(grep -o '[0-9.]* s from the death to the first step after the restore' <<<"$out"))"
else bad "elastic restart across the hosts (exit $rc)" "$out"; fi

# A host unplugged from the bridge (its port down: no socket closes, no packet
# arrives): the others name its task from the heartbeats, and it names theirs.
on_hosts "0 1 2 3" 90 TPURT_NUM_CORES=1 "$worker" soak 100000
if until_logs "transport tcp" 30; then
  ip -n "$bridge" link set h3 down
  on_hosts_wait
  ip -n "$bridge" link set h3 up
else
  kill_host_tasks 3
  on_hosts_wait
fi
if [ "${rcs[*]}" = "1 1 1 1" ] && [ "$(grep -c '^\[[0-2]\] .*UNAVAILABLE.*task 3' <<<"$out")" -ge 3 ] &&
   grep -q '^\[3\] .*UNAVAILABLE.*task [0-2]' <<<"$out"; then
  ok "host 3 unplugged from the bridge: tasks 0-2 name task 3 (TPU_UNAVAILABLE, heartbeats), and task 3 names them"
else bad "a host unplugged from the bridge (exits ${rcs[*]})" "$out"; fi

# Tokens across the hosts: four tasks with one token join; a task with a wrong token,
# or none, is refused by name (TPU_UNAUTHENTICATED). The others end within their init
# timeout (5 s): the first to give up names task 2 as never registered; one that is
# still waiting may hear first that that task left ("the cluster cannot form: task N
# ... lost").
on_hosts "0 1 2 3" 60 "TPURT_NUM_CORES=1 TPURT_CLUSTER_TOKEN=secret" "$worker" init
on_hosts_wait
if all_ok init; then
  ok "4 hosts with one cluster token join (HMAC handshake over the bridge)"
else bad "4 hosts with one cluster token (exits ${rcs[*]})" "$out"; fi
for case in wrong missing; do
  if [ $case = wrong ]; then set_token='export TPURT_CLUSTER_TOKEN=guess'; want='task 2 presented a wrong cluster token'
  else set_token='unset TPURT_CLUSTER_TOKEN'; want='the cluster at 10.77.0.1:29500 requires a token and task 2 has none'; fi
  started=$(ms)
  on_hosts "0 1 2 3" 60 "TPURT_NUM_CORES=1 TPURT_CLUSTER_TOKEN=secret TPURT_INIT_TIMEOUT_MS=5000" \
    sh -c "if [ \"\$DTENSOR_CLIENT_ID\" = 2 ]; then $set_token; fi; exec $worker init"
  on_hosts_wait
  took=$(($(ms) - started))
  others=$(grep '^\[[013]\] init: ' <<<"$out")
  if [ "${rcs[*]}" = "3 3 3 3" ] && [ $took -le 15000 ] && grep -qF "[2] init: UNAUTHENTICATED: $want" <<<"$out" &&
     grep -q 'DEADLINE_EXCEEDED: 3 of 4 tasks registered within 5000 ms; missing: task 2 (10.77.0.3:' <<<"$others" &&
     [ "$(grep -c 'DEADLINE_EXCEEDED: .*missing: task 2 \|UNAVAILABLE: the cluster cannot form: task [013] .* lost' <<<"$others")" = 3 ]; then
    ok "a task with a $case token on host 2: TPU_UNAUTHENTICATED ('$want'); the others end in $took ms, task 2 named missing"
  else bad "a task with a $case token on host 2 (exits ${rcs[*]}, $took ms)" "$out"; fi
done

echo "hosts: $passed passed, $failed failed"
[ $failed -eq 0 ]
