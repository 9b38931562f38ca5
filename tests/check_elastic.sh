#!/usr/bin/env bash
# Elastic launch: `tpurt launch -n 4 --min-tasks 3 --max-restarts 1` with a task killed
# (SIGKILL) in the middle of training restarts the demos on 3 tasks from their newest
# complete checkpoint, and their final check against the reference passes: the CTR
# demo over shm and over tcp, the linear demo over shm. A task killed while the others
# are inside tpu_checkpoint_save leaves the previous checkpoint as the one restored.
# The launcher's own rules, with small shell programs: a restart count used up, and
# --min-tasks out of reach, each end 1 naming the cause. Loopback only; every run is
# bounded by `timeout`, every wait by a count of 0.1 s sleeps.
set -euo pipefail
BUILD=${BUILD:-build}
TPURT=$BUILD/bin/tpurt
fail() { echo "check_elastic: $*" >&2; exit 1; }
dir=$(mktemp -d)
watchdog=
cleanup() {
  [ -n "$watchdog" ] && kill -KILL "$watchdog" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN (grep -E).
wait_for() {
  local i
  for i in $(seq $(($3 * 10))); do
    grep -Eq -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
# task_pid LAUNCHER I: the pid of task I of the launcher's current run.
task_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DTENSOR_CLIENT_ID=$2" && echo "$p" && return 0
  done
  return 1
}
# start_launch NAME TRANSPORT CKPT ARGS...: 4 tasks of one core, elastic down to 3,
# once, the restart's step read from CKPT; sets $launcher (the tpurt launch under
# $watchdog's `timeout`) and $out, $err.
start_launch() {
  local name=$1 transport=$2 ckpt=$3
  shift 3
  out=$dir/$name.out
  err=$dir/$name.err
  TPURT_TRANSPORT=$transport timeout 300 "$TPURT" launch -n 4 --cores-per-task 1 --min-tasks 3 \
    --max-restarts 1 --checkpoint-dir "$ckpt" -- "$@" >"$out" 2>"$err" &
  watchdog=$!
  launcher=
  for _ in $(seq 50); do
    launcher=$(pgrep -P "$watchdog" -x tpurt || true)
    [ -n "$launcher" ] && return 0
    sleep 0.1
  done
  fail "$name: the launcher did not start"
}
# end_launch NAME: waits for the launch; it must end 0 with 3 tasks passing their check.
end_launch() {
  local name=$1 rc=0
  wait "$watchdog" || rc=$?
  watchdog=
  [ "$rc" -eq 0 ] || fail "$name: the launch ended $rc: $(cat "$err"; tail -n 40 "$out")"
  for i in 0 1 2; do
    grep -qx "\[$i\] demo: OK" "$out" || fail "$name: task $i of the restart did not pass: $(cat "$out")"
  done
  [ "$(grep -c 'demo: OK$' "$out")" -eq 3 ] || fail "$name: not 3 tasks passed: $(grep 'demo: ' "$out")"
  grep -Eq '^tpurt launch: [0-9.]+ s from the death to the first step after the restore \(step [0-9]+\)$' "$err" ||
    fail "$name: no time to the first step after the restore: $(cat "$err")"
  grep "from the death" "$err"
}
# kill_in_training NAME TRANSPORT AT DEMO_ARGS...: task 2 gets SIGKILL once task 0 has
# saved the checkpoint of step AT; the restart on 3 tasks resumes from it or a newer one.
kill_in_training() {
  local name=$1 transport=$2 at=$3
  shift 3
  local ck=$dir/$name.ck
  start_launch "$name" "$transport" "$ck" "$TPURT" demo "$@" --checkpoint "$ck"
  wait_for "$out" "^\[0\] demo: checkpoint of step $at saved" 200 ||
    fail "$name: no checkpoint of step $at: $(cat "$err"; tail -n 20 "$out")"
  victim=$(task_pid "$launcher" 2) || fail "$name: no task 2 under launcher $launcher"
  kill -KILL "$victim"
  end_launch "$name"
  grep -Eq "^tpurt launch: task 2 died \(SIGKILL\) at step [0-9]+; restarting on 3 tasks from the checkpoint of step [0-9]+ \(restart 1 of 1\)$" "$err" ||
    fail "$name: the restart is not logged with its cause: $(cat "$err")"
  local from
  from=$(sed -nE 's/.*restarting on 3 tasks from the checkpoint of step ([0-9]+).*/\1/p' "$err")
  [ "$from" -ge "$at" ] || fail "$name: restarted from step $from, before the checkpoint of step $at"
  grep -q "^\[0\] demo: restored the checkpoint of step $from from " "$out" ||
    fail "$name: the restart did not restore step $from: $(grep 'demo: ' "$out")"
}

# The CTR demo: 4 replicas, then 3 (one per core of every task); 240 samples a step,
# which both counts divide.
ctr=(--embedding --batch 240 --steps 200 --checkpoint-every 20)
kill_in_training ctr_shm shm 40 "${ctr[@]}"
grep -q '^\[0\] tpurt demo --embedding: click-through-rate logistic regression, 3 replicas,' "$out" ||
  fail "ctr_shm: the restart did not run 3 replicas: $(grep 'replicas' "$out")"
kill_in_training ctr_tcp tcp 40 "${ctr[@]}"
kill_in_training linear_shm shm 200 --steps 2000 --checkpoint-every 100 --check

# A task killed while the others are inside tpu_checkpoint_save: task 3 stops itself
# before its save of step 60 (the demo's test hook), so the others wait for its shards
# inside theirs; task 0, which writes the manifest last, gets SIGKILL there. The
# restart restores the checkpoint of step 40.
ck=$dir/in_save.ck
TPURT_DEMO_STOP_BEFORE_SAVE=3:60 start_launch in_save shm "$ck" "$TPURT" demo "${ctr[@]}" --checkpoint "$ck"
wait_for "$out" '^\[0\] demo: saving the checkpoint of step 60$' 200 ||
  fail "in_save: task 0 did not reach the save of step 60: $(cat "$err"; tail -n 20 "$out")"
stopped=
for _ in $(seq 100); do
  t3=$(task_pid "$launcher" 3 || true)
  [ -n "$t3" ] && [ "$(awk '{print $3}' "/proc/$t3/stat" 2>/dev/null)" = T ] && stopped=1 && break
  sleep 0.1
done
[ -n "$stopped" ] || fail "in_save: task 3 did not stop before its save"
sleep 0.5  # task 0 is in its save, waiting for task 3's shards
[ ! -e "$ck/ckpt-60/manifest.json" ] || fail "in_save: the checkpoint of step 60 completed without task 3"
kill -KILL "$(task_pid "$launcher" 0)"
end_launch in_save
grep -Eq '^tpurt launch: task 0 died \(SIGKILL\) at step 60; restarting on 3 tasks from the checkpoint of step 40 \(restart 1 of 1\)$' "$err" ||
  fail "in_save: the restart's cause: $(cat "$err")"
grep -q '^\[0\] demo: restored the checkpoint of step 40 from ' "$out" ||
  fail "in_save: the restart did not restore step 40: $(grep 'demo: ' "$out")"

# The launcher's rules, on shell programs that report steps the way the demos do.
cat >"$dir/prog.sh" <<'PROG'
#!/bin/sh
# Reports steps 0-2; task $VICTIM then kills itself, the others wait to be stopped.
for s in 0 1 2; do echo "tpurt-progress: step $s"; done
[ "$DTENSOR_CLIENT_ID" = 0 ] && echo "tpurt-progress: checkpoint 2"
if [ "$DTENSOR_CLIENT_ID" = "$VICTIM" ]; then sleep 0.3; kill -KILL $$; fi
exec sleep 60
PROG
chmod +x "$dir/prog.sh"
# Every run loses task 1: after the one restart allowed, the launch gives up naming it.
rc=0
VICTIM=1 timeout 60 "$TPURT" launch -n 4 --min-tasks 2 --max-restarts 1 -- "$dir/prog.sh" \
  >"$dir/o" 2>"$dir/e" || rc=$?
[ "$rc" -eq 1 ] || fail "restarts used up: exit $rc: $(cat "$dir/e")"
grep -qx 'tpurt launch: task 1 died (SIGKILL) at step 3; restarting on 3 tasks from the checkpoint of step 2 (the newest reported) (restart 1 of 1)' "$dir/e" &&
  grep -qx 'tpurt launch: task 1 died (SIGKILL) at step 3; no restart left (--max-restarts 1: all used); giving up' "$dir/e" ||
  fail "restarts used up: $(cat "$dir/e")"
# 3 tasks that must stay 3: losing one ends the launch.
rc=0
VICTIM=2 timeout 60 "$TPURT" launch -n 3 --min-tasks 3 --max-restarts 5 -- "$dir/prog.sh" \
  >"$dir/o" 2>"$dir/e" || rc=$?
[ "$rc" -eq 1 ] || fail "--min-tasks out of reach: exit $rc: $(cat "$dir/e")"
grep -qx 'tpurt launch: task 2 died (SIGKILL) at step 3; 2 tasks left, fewer than --min-tasks 3; giving up' "$dir/e" ||
  fail "--min-tasks out of reach: $(cat "$dir/e")"
grep -q restarting "$dir/e" && fail "--min-tasks out of reach restarted: $(cat "$dir/e")"

# Bad usage: exit 2 naming the value.
for bad in "demo --checkpoint-every 5|--checkpoint-every: only with --checkpoint DIR" \
  "demo --mesh 2,2 --checkpoint $dir/x|--checkpoint: not with --mesh" \
  "demo --checkpoint $dir/x --checkpoint-every 0|--checkpoint-every: 0 is outside"; do
  rc=0
  # shellcheck disable=SC2086
  timeout 30 "$TPURT" ${bad%%|*} >"$dir/o" 2>"$dir/e" || rc=$?
  [ "$rc" -eq 2 ] && grep -qF -- "${bad#*|}" "$dir/e" || fail "tpurt ${bad%%|*}: exit $rc: $(cat "$dir/e")"
done

rc=0
timeout 30 "$TPURT" launch -n 2 --checkpoint-dir '' -- true >"$dir/o" 2>"$dir/e" || rc=$?
[ "$rc" -eq 2 ] && grep -qF -- "--checkpoint-dir: an empty directory name" "$dir/e" ||
  fail "launch --checkpoint-dir '': exit $rc: $(cat "$dir/e")"

echo "check_elastic: SIGKILL in training restarts on 3 tasks (CTR demo over shm and tcp, linear demo)," \
  "a kill inside tpu_checkpoint_save restores the previous checkpoint, restarts used up and" \
  "--min-tasks out of reach named, usage errors OK"
