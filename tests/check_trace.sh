#!/usr/bin/env bash
# Traces across tasks and `tpurt trace`: 2-task runs (tpurt launch, over loopback)
# writes one trace per task (".task<T>" inserted, or "%t" replaced); merged, every
# task's events of the step overlap in time (clocks aligned by the coordination
# service); `tpurt trace summary` names the replica made late (test_trace's trace) as
# the first straggler; garbage, truncated and wrong files are refused by name, never
# a crash (exit 1, not a signal).
set -euo pipefail
BUILD=${BUILD:-build}
TPURT=$BUILD/bin/tpurt
fail() { echo "check_trace: $*" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# --- the command -----------------------------------------------------------------
"$TPURT" trace --help | grep -q '^usage: tpurt trace merge' || fail "tpurt trace --help"
"$TPURT" --help | grep -q '^  trace ' || fail "tpurt --help does not list trace"
rc=0; "$TPURT" trace merge "$dir/none.json" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "merge without -o exited $rc, not 2 (bad usage)"

# --- two tasks --------------------------------------------------------------------
TPURT_TRACE=$dir/two.json timeout 120 "$TPURT" launch -n 2 -- "$TPURT" demo --mesh 2,2 --steps 3 \
  >"$dir/out" 2>&1 || fail "the traced 2-task demo failed: $(tail -5 "$dir/out")"
for t in 0 1; do [ -s "$dir/two.task$t.json" ] || fail "no trace two.task$t.json: $(ls "$dir")"; done
"$TPURT" trace merge "$dir/two.task0.json" "$dir/two.task1.json" -o "$dir/all.json" >/dev/null
jq -e 'type == "array"' "$dir/all.json" >/dev/null || fail "the merged trace is not a JSON array"
# Both tasks, each with its own participants (one tid each) and the tcp or shm transport.
[ "$(jq '[.[] | select(.ph == "X") | .pid] | unique' -c "$dir/all.json")" = "[0,1]" ] ||
  fail "the merged trace does not hold tasks 0 and 1"
[ "$(jq '[.[] | select(.cat == "compute") | [.pid, .tid]] | unique | length' "$dir/all.json")" = 4 ] ||
  fail "not 4 participants (2 tasks x 2 cores of a replica) with computations"
jq -e '[.[] | select(.cat == "collective") | .args.transport] | unique | all(. == "tcp" or . == "shm" or . == "shm+tcp")' \
  "$dir/all.json" >/dev/null || fail "collectives without the tasks' transport"
# Aligned clocks: in every step, the tasks' step spans overlap (each begins before the
# other ends), as one step across two processes must.
bad=$(jq -r '[.[] | select(.name == "step")] | group_by(.args.step)[] |
  select(length == 2 and (.[0].ts > .[1].ts + .[1].dur or .[1].ts > .[0].ts + .[0].dur)) | .[0].args.step' \
  "$dir/all.json")
[ -z "$bad" ] || fail "the tasks' spans of step(s) $bad do not overlap: clocks not aligned"
[ "$(jq '[.[] | select(.name == "step")] | length' "$dir/all.json")" -ge 2 ] || fail "not a step on each task"
# The same task twice is refused.
if "$TPURT" trace merge "$dir/two.task0.json" "$dir/two.task0.json" -o "$dir/x.json" 2>"$dir/err"; then
  fail "merging one task's trace twice succeeded"
fi
grep -q "holds task 0" "$dir/err" || fail "merge of a task twice: $(cat "$dir/err")"

# "%t" names each task's file itself.
TPURT_TRACE=$dir/t%t-trace.json timeout 120 "$TPURT" bench --tasks 2 -r 2 -b 1K -e 4K -n 2 >"$dir/out" 2>&1 || fail "the %t run failed: $(tail -5 "$dir/out")"
for t in 0 1; do [ -s "$dir/t$t-trace.json" ] || fail "no t$t-trace.json: $(ls "$dir")"; done

# --- the straggler ----------------------------------------------------------------
TRACE_TEST_KEEP=$dir/late.json "$BUILD/tests/test_trace" test_trace__late_replica_waits_least >"$dir/out" 2>&1 ||
  fail "test_trace__late_replica_waits_least: $(cat "$dir/out")"
"$TPURT" trace summary "$dir/late.json" >"$dir/summary" || fail "summary failed"
first=$(sed -n '/^stragglers/{n;p;}' "$dir/summary")
grep -q "task 0 replica 2 " <<<"$first" || fail "the first straggler is not replica 2: $(cat "$dir/summary")"
grep -q "steps 1$" <<<"$first" || fail "the straggler's step is not 1: $first"
grep -q "^all_reduce " "$dir/summary" || fail "no all_reduce row: $(cat "$dir/summary")"

# --- what is not a trace ----------------------------------------------------------
refused() {  # refused WHAT FRAGMENT FILE: summary and merge exit 1 naming the file
  local what=$1 fragment=$2 file=$3 rc
  for cmd in summary merge; do
    rc=0
    if [ "$cmd" = summary ]; then "$TPURT" trace summary "$file" >/dev/null 2>"$dir/err" || rc=$?
    else "$TPURT" trace merge "$file" -o "$dir/m.json" >/dev/null 2>"$dir/err" || rc=$?; fi
    [ "$rc" -eq 1 ] || fail "$what: trace $cmd exited $rc, not 1: $(cat "$dir/err")"
    grep -qF "$file" "$dir/err" || fail "$what: trace $cmd does not name the file: $(cat "$dir/err")"
    grep -qF "$fragment" "$dir/err" || fail "$what: trace $cmd lacks '$fragment': $(cat "$dir/err")"
  done
}
printf 'not json at all' >"$dir/garbage"
refused "garbage" "is not JSON" "$dir/garbage"
printf '{"a": 1}' >"$dir/object"
refused "an object" "is not a trace" "$dir/object"
printf '[1, 2]' >"$dir/numbers"
refused "numbers" "event 0 is not a JSON object" "$dir/numbers"
printf '[{"ph": "X", "pid": 0, "tid": 1, "name": "x", "ts": "soon", "dur": 1}]' >"$dir/badts"
refused "a string ts" "no number \"ts\"" "$dir/badts"
printf '[{"ph": "X", "pid": 0, "tid": 1, "name": "all_reduce", "cat": "collective", "ts": 1, "dur": 1, "args": {}}]' >"$dir/noargs"
rc=0; "$TPURT" trace summary "$dir/noargs" >/dev/null 2>"$dir/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "lacks the numbers" "$dir/err" || fail "a collective without its numbers: rc $rc $(cat "$dir/err")"
refused "a missing file" "cannot be read" "$dir/none.json"
# A trace cut short (its process died before shutdown) still reads.
head -c -3 "$dir/two.task0.json" | sed '$ d' >"$dir/cut.json"
"$TPURT" trace summary "$dir/cut.json" >/dev/null 2>"$dir/err" || fail "a cut trace: $(cat "$dir/err")"
# Random bytes, and every prefix of a real trace: refused or read, never a signal.
for i in $(seq 1 20); do
  head -c $((RANDOM % 4000 + 1)) /dev/urandom >"$dir/rand"
  rc=0; "$TPURT" trace summary "$dir/rand" >/dev/null 2>&1 || rc=$?
  [ "$rc" -le 1 ] || fail "random bytes: summary exited $rc"
  size=$(stat -c %s "$dir/two.task1.json")
  head -c $((RANDOM * 7 % size)) "$dir/two.task1.json" >"$dir/prefix"
  rc=0; "$TPURT" trace summary "$dir/prefix" >/dev/null 2>&1 || rc=$?
  [ "$rc" -le 1 ] || fail "a prefix of a trace: summary exited $rc"
done
echo "check_trace: ok"
