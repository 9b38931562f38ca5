#!/usr/bin/env bash
# tpurt launch, as a user runs it: each task's DTensor environment (ids, one shared
# DTENSOR_JOBS of distinct ports, --port-base, --cores-per-task, the other resolvers'
# variables removed), prefixed output on the right stream (partial last lines, long
# lines split whole), the first failure (exit status, signal, a program that cannot
# run) taking the others down, --keep-going, --timeout, SIGTERM and SIGINT to the
# launcher, --bind (each task on its share of the CPUs), and bad usage. After every run nothing of it is left: the sleeping tasks
# run a copy of sleep under a unique name that pgrep looks for. Every run is bounded
# by `timeout`.
set -euo pipefail
BUILD=${BUILD:-build}
TPURT=$BUILD/bin/tpurt
fail() { echo "check_launch: $*" >&2; exit 1; }
dir=$(mktemp -d)
launcher=
cleanup() {
  [ -n "$launcher" ] && kill -KILL "$launcher" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
out=$dir/out
err=$dir/err
# A sleep whose name is this run's own (short enough for a zombie's 15-byte comm too).
marker=tl_mk_$$
ln -s "$(command -v sleep)" "$dir/$marker"
export NAP=$dir/$marker

# run RC_VAR ARGS...: the launcher under `timeout 30`, stdout and stderr to $out, $err.
run() {
  local -n rc_=$1
  shift
  rc_=0
  timeout 30 "$TPURT" launch "$@" >"$out" 2>"$err" || rc_=$?
  [ "$rc_" -ne 124 ] || fail "launch $* did not end within 30 s: $(cat "$err")"
}
nothing_left() {
  local left
  left=$(pgrep -f "$marker" || true)
  [ -z "$left" ] || fail "$1: tasks left behind: $(ps -o pid,ppid,stat,args -p "${left//$'\n'/,}")"
}
expect_usage() {
  local what=$1 fragment=$2 rc
  shift 2
  run rc "$@"
  [ "$rc" -eq 2 ] || fail "$what: exited $rc, not 2 (bad usage): $(cat "$err")"
  grep -qF -- "$fragment" "$err" || fail "$what: message lacks '$fragment': $(cat "$err")"
}

"$TPURT" launch --help | grep -q '^usage: tpurt launch ' || fail "tpurt launch --help"
"$TPURT" --help | grep -q '^  launch ' || fail "tpurt --help does not list launch"

# Three tasks: ids 0..2, one DTENSOR_JOBS of three distinct free ports on 127.0.0.1.
run rc -n 3 -- sh -c 'echo id=$DTENSOR_CLIENT_ID jobs=$DTENSOR_JOBS'
[ "$rc" -eq 0 ] || fail "3 echoing tasks: exit $rc: $(cat "$err")"
[ "$(wc -l <"$out")" -eq 3 ] || fail "3 tasks printed: $(cat "$out")"
for i in 0 1 2; do
  grep -q "^\[$i\] id=$i jobs=" "$out" || fail "no line '[$i] id=$i': $(cat "$out")"
done
[ "$(sed 's/.* jobs=//' "$out" | sort -u | wc -l)" -eq 1 ] || fail "tasks saw different jobs: $(cat "$out")"
jobs=$(sed -n 's/^\[0\] .* jobs=//p' "$out")
grep -Eq '^127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+$' <<<"$jobs" ||
  fail "DTENSOR_JOBS is '$jobs'"
[ "$(tr ',' '\n' <<<"$jobs" | sort -u | wc -l)" -eq 3 ] || fail "ports not distinct: $jobs"

# --port-base, --cores-per-task, the rest of the environment; TF_CONFIG and the Slurm
# and MPI markers do not reach the tasks, TPURT_NUM_CORES only with --cores-per-task.
show='echo "$DTENSOR_CLIENT_ID $DTENSOR_JOBS $DTENSOR_JOB_NAME $TPURT_LAUNCH_TASKS'
show+=' cores=${TPURT_NUM_CORES-unset} tf=${TF_CONFIG-unset} slurm=${SLURM_JOB_ID-unset}'
show+=' mpi=${OMPI_COMM_WORLD_SIZE-unset}"'
rc=0
TF_CONFIG='{"cluster":{}}' SLURM_JOB_ID=7 OMPI_COMM_WORLD_SIZE=4 TPURT_NUM_CORES=8 timeout 30 \
  "$TPURT" launch -n 3 --port-base 20000 --cores-per-task 2 -- sh -c "$show" >"$out" 2>"$err" || rc=$?
[ "$rc" -eq 0 ] || fail "--port-base 20000: exit $rc: $(cat "$err")"
expect='127.0.0.1:20000,127.0.0.1:20001,127.0.0.1:20002 worker 3 cores=2 tf=unset slurm=unset mpi=unset'
for i in 0 1 2; do
  grep -qxF "[$i] $i $expect" "$out" || fail "task $i's environment: $(cat "$out")"
done
rc=0
env -u TPURT_NUM_CORES timeout 30 "$TPURT" launch -n 1 --host 127.0.0.2 --port-base 30000 -- \
  sh -c "$show" >"$out" 2>"$err" || rc=$?
grep -qxF '[0] 0 127.0.0.2:30000 worker 1 cores=unset tf=unset slurm=unset mpi=unset' "$out" ||
  fail "--host 127.0.0.2 without --cores-per-task: $(cat "$out") $(cat "$err")"

# --bind: with --cores-per-task C, task i runs on the launcher's CPUs i*C .. i*C+C-1
# (wrapping around); --bind none and no --cores-per-task leave the launcher's mask.
allowed='sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status'
cpus=$(sh -c "$allowed")
# The launcher's CPUs one per line ("0-2,5" -> 0 1 2 5).
mapfile -t list < <(tr ',' '\n' <<<"$cpus" | while IFS=- read -r lo hi; do seq "$lo" "${hi:-$lo}"; done)
rc=0
timeout 30 "$TPURT" launch -n 3 --cores-per-task 1 -- sh -c "$allowed" >"$out" 2>"$err" || rc=$?
[ "$rc" -eq 0 ] || fail "--bind spread: exit $rc: $(cat "$err")"
for i in 0 1 2; do
  want=${list[$((i % ${#list[@]}))]}
  grep -qxF "[$i] $want" "$out" || fail "--bind spread: task $i runs on '$(cat "$out")', not CPU $want"
done
# On one CPU (the launcher's first) every task shares it, whatever C.
rc=0
timeout 30 taskset -c "${list[0]}" "$TPURT" launch -n 3 --cores-per-task 2 -- sh -c "$allowed" \
  >"$out" 2>"$err" || rc=$?
[ "$rc" -eq 0 ] || fail "--bind on one CPU: exit $rc: $(cat "$err")"
for i in 0 1 2; do
  grep -qxF "[$i] ${list[0]}" "$out" || fail "--bind, one CPU: task $i runs on '$(cat "$out")'"
done
for args in "--cores-per-task 1 --bind none" ""; do
  rc=0
  # shellcheck disable=SC2086
  timeout 30 "$TPURT" launch -n 2 $args -- sh -c "$allowed" >"$out" 2>"$err" || rc=$?
  [ "$rc" -eq 0 ] || fail "launch $args: exit $rc: $(cat "$err")"
  for i in 0 1; do
    grep -qxF "[$i] $cpus" "$out" ||
      fail "launch ${args:-without --cores-per-task}: task $i runs on '$(cat "$out")', not $cpus"
  done
done

# stderr lines are prefixed and stay on stderr; a partial last line is printed whole.
run rc -n 2 -- sh -c 'echo to-out; echo to-err >&2; printf "no newline $DTENSOR_CLIENT_ID"'
[ "$rc" -eq 0 ] || fail "stream test: exit $rc"
grep -qx '\[1\] to-err' "$err" || fail "stderr not prefixed on stderr: $(cat "$err")"
grep -q 'to-err' "$out" && fail "stderr leaked to stdout: $(cat "$out")"
grep -qx '\[0\] to-out' "$out" || fail "stdout line: $(cat "$out")"
grep -qx '\[1\] no newline 1' "$out" || fail "partial last line: $(cat "$out")"

# A 100000-byte line comes out in prefixed pieces of 64 KiB at most, nothing lost.
run rc -n 1 -- sh -c 'head -c 100000 /dev/zero | tr "\0" a; echo; echo next'
[ "$rc" -eq 0 ] || fail "long line: exit $rc"
lines=$(grep -c '^\[0\] a' "$out" || true)
total=$(grep '^\[0\] a' "$out" | awk '{n += length($0) - 4} END {print n}')
[ "$lines" -eq 2 ] && [ "$total" -eq 100000 ] || fail "long line: $lines pieces, $total bytes"
grep -qx '\[0\] next' "$out" || fail "the line after the long one is missing"

# When nobody reads the launcher's stdout any more, the tasks' writes fail too: a
# task that writes forever ends (by SIGPIPE) instead of running on unread.
set +o pipefail
timeout 30 "$TPURT" launch -n 2 -- yes 2>/dev/null | head -n 1 >/dev/null
rc=${PIPESTATUS[0]}
set -o pipefail
[ "$rc" -eq 1 ] || fail "launch -- yes | head: launcher exited $rc, not 1"

# The first failure: task 1 exits 3 while the others sleep; they are taken down.
SECONDS=0
run rc -n 3 -- sh -c 'if [ "$DTENSOR_CLIENT_ID" = 1 ]; then sleep 0.2; exit 3; fi; "$NAP" 60'
[ "$rc" -eq 1 ] || fail "a task exiting 3: launcher exited $rc, not 1"
[ "$SECONDS" -le 12 ] || fail "a task exiting 3: the launcher took $SECONDS s"
grep -Eq '^tpurt launch: task 1 \(pid [0-9]+\) exited with status 3$' "$err" ||
  fail "exit 3 not named: $(cat "$err")"
[ "$(grep -c '^tpurt launch: task' "$err")" -eq 1 ] || fail "more than the first failure: $(cat "$err")"
nothing_left "a task exiting 3"

# A task killed by a signal, named by its signal; tasks that ignore SIGTERM (and their
# children) get SIGKILL after the grace period.
run rc -n 2 -- sh -c 'trap "" TERM; "$NAP" 60 & if [ "$DTENSOR_CLIENT_ID" = 0 ]; then sleep 0.3; kill -9 $$; fi; wait'
[ "$rc" -eq 1 ] || fail "kill -9: launcher exited $rc"
grep -Eq '^tpurt launch: task 0 \(pid [0-9]+\) was killed by signal SIGKILL \(9\)$' "$err" ||
  fail "SIGKILL not named: $(cat "$err")"
nothing_left "kill -9 with SIGTERM ignored"

# --keep-going: the others finish; still exit 1 naming the first failure.
run rc -n 3 --keep-going -- sh -c '[ "$DTENSOR_CLIENT_ID" = 1 ] && exit 5; sleep 0.5; echo done'
[ "$rc" -eq 1 ] || fail "--keep-going: exit $rc"
[ "$(grep -c done "$out")" -eq 2 ] || fail "--keep-going stopped the others: $(cat "$out")"
grep -q 'task 1 (pid [0-9]*) exited with status 5' "$err" || fail "--keep-going: $(cat "$err")"

# --timeout names the tasks still running and takes them down.
run rc -n 3 --timeout 2 -- sh -c '[ "$DTENSOR_CLIENT_ID" = 0 ] || "$NAP" 60'
[ "$rc" -eq 1 ] || fail "--timeout 2: exit $rc"
grep -qx 'tpurt launch: timeout after 2 s; still running: tasks 1, 2' "$err" ||
  fail "--timeout message: $(cat "$err")"
nothing_left "--timeout"

# A program that cannot run.
run rc -n 2 -- "$dir/no_such_program" arg
[ "$rc" -eq 1 ] || fail "missing program: exit $rc"
grep -qF "tpurt launch: task 0: cannot run '$dir/no_such_program': No such file or directory" "$err" ||
  fail "missing program: $(cat "$err")"

# SIGTERM (and SIGINT) to the launcher reach the tasks and what they started. Each
# run has its own files: the wait below must not see the previous run's lines.
for sig in TERM INT; do
  timeout 30 "$TPURT" launch -n 2 -- sh -c '"$NAP" 60 & echo ready; wait' >"$out.$sig" 2>"$err" &
  launcher=$!
  for _ in $(seq 100); do
    [ "$(grep -c ready "$out.$sig" 2>/dev/null)" = 2 ] && break
    sleep 0.1
  done
  [ "$(grep -c ready "$out.$sig" 2>/dev/null)" = 2 ] ||
    fail "SIG$sig: the tasks did not start: $(cat "$out.$sig" "$err")"
  # `timeout` runs the launcher as its child: signal the launcher itself.
  pid=$(pgrep -P "$launcher" -x tpurt)
  kill -"$sig" "$pid"
  rc=0
  wait "$launcher" || rc=$?
  launcher=
  want=$([ "$sig" = TERM ] && echo 143 || echo 130)
  [ "$rc" -eq "$want" ] || fail "SIG$sig to the launcher: exit $rc, not $want: $(cat "$err")"
  nothing_left "SIG$sig to the launcher"
done

# Model parallelism across tasks: the mesh demo's replicas span both tasks (2,2: one
# replica per task) and its "model" groups do too (1,2: one replica of a core in each
# task); bench's cross-partition all-reduce over a replica split between the tasks
# (bench --tasks runs under tpurt launch).
for m in 2,2 1,2; do
  run rc -n 2 -- "$TPURT" demo --mesh "$m" --batch 16 --steps 5
  [ "$rc" -eq 0 ] || fail "demo --mesh $m under launch: exit $rc: $(cat "$out" "$err")"
  for i in 0 1; do
    grep -qx "\[$i\] demo: OK" "$out" || fail "demo --mesh $m, task $i: $(cat "$out")"
  done
done
# The embedding demo across tasks: each task checks the rows it holds and its replicas'
# dense weights; bench --embedding's first step across tasks, over shm.
run rc -n 2 --cores-per-task 2 -- "$TPURT" demo --embedding --steps 30
[ "$rc" -eq 0 ] || fail "demo --embedding under launch: exit $rc: $(cat "$out" "$err")"
for i in 0 1; do
  grep -qx "\[$i\] demo: OK" "$out" && grep -q "^\[$i\] rows held by other tasks left as they were by retrieve: yes" "$out" ||
    fail "demo --embedding, task $i: $(cat "$out")"
done
rc=0
timeout 60 "$TPURT" bench --embedding --tasks 2 --cores-per-task 2 --transport shm -n 3 >"$out" 2>"$err" || rc=$?
[ "$rc" -eq 0 ] || fail "bench --embedding --tasks 2: exit $rc: $(cat "$out" "$err")"
grep -q '^\[0\] # step 0 from a zero table against Adagrad written out: ok' "$out" &&
  grep -q '^\[0\] # 2 tasks of 2 core(s), transport shm' "$out" ||
  fail "bench --embedding --tasks 2 printed: $(cat "$out")"
rc=0
timeout 60 "$TPURT" bench --tasks 2 --cores-per-replica 2 --group-mode cross-partition -b 8 -e 1K \
  -f 32 -n 3 --csv >"$out" 2>"$err" || rc=$?
[ "$rc" -eq 0 ] || fail "bench --tasks 2 --group-mode cross-partition: exit $rc: $(cat "$err")"
grep -q '^\[0\] # collective=all_reduce,replicas=2,.*cores_per_replica=2,group_mode=cross-partition,group_size=2$' \
  "$out" && grep -q '^\[0\] 1024,256,float32,sum,.*,0$' "$out" ||
  fail "bench --tasks 2 --group-mode cross-partition printed: $(cat "$out")"

# Bad usage: exit 2 naming the value.
expect_usage "no -n" "missing -n" -- true
expect_usage "-n 0" "-n: 0 is outside [1, 1024]" -n 0 -- true
expect_usage "-n 1025" "-n: 1025 is outside [1, 1024]" -n 1025 -- true
expect_usage "-n abc" "-n: 'abc' is not an integer" -n abc -- true
expect_usage "no --" "missing '--' before the program 'true'" -n 2 true
expect_usage "no program" "missing the program after '--'" -n 2 --
expect_usage "--timeout x" "--timeout: 'x' is not a positive number" -n 2 --timeout x -- true
expect_usage "--port-base" "--port-base: 'p' is not an integer" -n 2 --port-base p -- true
expect_usage "--port-base past 65535" "--port-base: 65535 + 2 tasks passes port 65535" \
  -n 2 --port-base 65535 -- true
expect_usage "--cores-per-task 0" "--cores-per-task: 0 is outside" -n 2 --cores-per-task 0 -- true
expect_usage "unknown option" "unknown option '--bogus'" -n 2 --bogus -- true
expect_usage "--bind bogus" "--bind: unknown mode 'bogus' (spread or none)" -n 2 --bind bogus -- true
expect_usage "--host with a comma" "--host: 'a,b'" -n 2 --host a,b -- true
expect_usage "--min-tasks above -n" "--min-tasks: 3 is more than the 2 tasks of -n" \
  -n 2 --min-tasks 3 -- true
expect_usage "--min-tasks 0" "--min-tasks: 0 is outside [1, 1024]" -n 2 --min-tasks 0 -- true
expect_usage "--max-restarts -1" "--max-restarts: -1 is outside [0, 1000]" -n 2 --max-restarts -1 -- true
expect_usage "--keep-going with --max-restarts" "--keep-going and --max-restarts" \
  -n 2 --keep-going --max-restarts 1 -- true

echo "check_launch: environment, ports, CPU binding, prefixed streams, long and partial lines, first failure," \
  "signals, --keep-going, --timeout, unrunnable program, SIGTERM/SIGINT, demo --mesh, demo and bench --embedding, bench" \
  "--group-mode across tasks, usage errors OK"
