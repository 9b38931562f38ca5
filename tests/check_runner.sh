#!/usr/bin/env bash
# The test runner (tests/run_tests.sh) on a fixture (tests/runner/): each case runs in
# its own process; a case that fails, exits early or hangs is named with its output (a
# skipped one counts as neither passed nor failed); a hang is killed, with its child,
# at its limit; T= selects by case, binary, glob or prefix; --list gives each case its
# limit; a binary without --list, or not built, fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
child_pid=
cleanup() {
  # The hanging case's child, if the runner failed to end it.
  if [ -n "$child_pid" ]; then kill -KILL "$child_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "check_runner: $*" >&2; exit 1; }
unset T TPURT_TEST_TIMEOUT_MULTIPLIER SANITIZE CMOCKA_MESSAGE_OUTPUT

# Plain build whatever SANITIZE the outer `make test` has: the fixture tests the runner.
${CC:-gcc} -std=c11 -Iinclude -Itests -o "$tmp/runner_fixture" tests/runner/fixture.c -lcmocka ||
  fail "cannot build the fixture"
cp "$(type -P true)" "$tmp/no_list" # a binary whose main ignores --list
fixture=("$tmp/runner_fixture" tests/runner/fixture_suite.sh)
export TPURT_TEST_LIST=tests/runner/test-list BUILD="$tmp/build"
export FIXTURE_CHILD_PID_FILE="$tmp/child.pid"

runner() { timeout -k 5 60 bash tests/run_tests.sh "$@"; }
# The lines of $out from "--- output of NAME" to "--- end of NAME".
output_of() { sed -n "/^--- output of $1 /,/^--- end of $1\$/p" <<<"$out"; }
has() { grep -qF -- "$2" <<<"$1" || fail "no '$2' in:"$'\n'"$1"; }

# --- the whole fixture --------------------------------------------------------------
start=$(date +%s)
rc=0
out=$(runner "${fixture[@]}" "$tmp/missing" 2>&1) || rc=$?
elapsed=$(($(date +%s) - start))
[ "$rc" -eq 1 ] || fail "the runner exited $rc, expected 1:"$'\n'"$out"
[ "$(tail -n 1 <<<"$out")" = "3 passed, 4 failed" ] || fail "wrong summary:"$'\n'"$out"
# 2 s, then SIGKILL 5 s later, plus the other cases: well within 30 s.
[ "$elapsed" -lt 30 ] || fail "the hanging case held the runner ${elapsed} s"

has "$out" "ok    runner_fixture__passes"
grep -q "fixture: output of the passing case" <<<"$out" && fail "a passing case's output was shown"
has "$(grep '^FAIL  runner_fixture__fails ' <<<"$out")" "(exit 1)"
fails=$(output_of runner_fixture__fails)
has "$fails" "fixture: output before the failure"
has "$fails" "fixture: the failing check"
has "$fails" "[  FAILED  ] runner_fixture__fails"
grep -q runner_fixture__passes <<<"$fails" && fail "another case ran in the failing case's process"
has "$(grep '^FAIL  runner_fixture__hangs ' <<<"$out")" "(out of time: killed after 2 s)"
has "$(output_of runner_fixture__hangs)" "fixture: hanging"
has "$(grep '^FAIL  runner_fixture__exits_early ' <<<"$out")" "(exit 0 before cmocka's OK line)"
has "$out" "ok    fixture_suite" # counted as its own "2 passed" line
has "$out" "skip  runner_fixture__skips"
has "$out" "skipped: runner_fixture__skips"
for f in "runner_fixture__fails (exit 1)" "runner_fixture__hangs (out of time: killed after 2 s)" \
         "runner_fixture__exits_early (exit 0 before cmocka's OK line)" "missing (not built)"; do
  has "$out" "FAILED: $f"
done
[ -s "$tmp/child.pid" ] || fail "the hanging case never started its child"
child_pid=$(cat "$tmp/child.pid")
# Gone, or a zombie not yet reaped by init (bounded: SIGKILL takes a moment to land).
for _ in $(seq 50); do
  state=$(ps -o stat= -p "$child_pid" || true)
  if [ -z "$state" ] || [[ $state == Z* ]]; then break; fi
  sleep 0.1
done
[ -z "$state" ] || [[ $state == Z* ]] || fail "the hanging case's child $child_pid outlived it ($state)"
child_pid=
[ -s "$tmp/build/test-logs/runner_fixture.runner_fixture__passes.log" ] ||
  fail "no log of the passing case in \$BUILD/test-logs"

# --- T: one case, a binary, a glob, a prefix; no match ------------------------------
selects() { # T expected-summary expected-case...
  local t=$1 want=$2 got
  shift 2
  out=$(T=$t runner "${fixture[@]}") || true
  [ "$(tail -n 1 <<<"$out")" = "$want" ] || fail "T='$t': expected '$want':"$'\n'"$out"
  got=$(grep -oE '^(ok|FAIL) +[^ ]+' <<<"$out" | awk '{print $2}' | sort | tr '\n' ' ')
  [ "$got" = "$(printf '%s\n' "$@" | sort | tr '\n' ' ')" ] || fail "T='$t' ran: $got"
}
selects runner_fixture__passes "1 passed, 0 failed" runner_fixture__passes
selects runner_fixture__pa "1 passed, 0 failed" runner_fixture__passes
selects '*__fail*' "0 passed, 1 failed" runner_fixture__fails
selects fixture_suite.sh,runner_fixture__passes "3 passed, 0 failed" fixture_suite runner_fixture__passes
# A binary's every case (listed, not run: the hang was timed above).
[ "$(T=runner_fixture runner --list "${fixture[@]}" | awk '{print $1}' | sort | tr '\n' ' ')" = \
  "runner_fixture__exits_early runner_fixture__fails runner_fixture__hangs runner_fixture__passes runner_fixture__skips " ] ||
  fail "T=runner_fixture does not select the binary's five cases"
rc=0
out=$(T=nothing_is_called_this runner "${fixture[@]}" 2>&1) || rc=$?
[ "$rc" -eq 2 ] || fail "T matching nothing exited $rc"
has "$out" "no case matches 'nothing_is_called_this'"

# --- --list: every case with its limit, scaled ------------------------------------------
limit_of() { awk -v c="$1" '$1 == c {print $2}' <<<"$out"; }
out=$(runner --list "${fixture[@]}")
[ "$(wc -l <<<"$out")" -eq 6 ] || fail "--list: expected 6 cases:"$'\n'"$out"
[ "$(limit_of runner_fixture__hangs)" = 2s ] && [ "$(limit_of fixture_suite)" = 10s ] ||
  fail "--list: wrong limits:"$'\n'"$out"
out=$(TPURT_TEST_TIMEOUT_MULTIPLIER=2 SANITIZE=address runner --list "${fixture[@]}")
[ "$(limit_of runner_fixture__hangs)" = 12s ] || fail "limits not scaled by 2 x 3:"$'\n'"$out"

# --- a binary without --list; a bad line in the list ------------------------------
rc=0
out=$(runner "$tmp/no_list" 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "a binary without --list: exit $rc"
has "$out" "FAILED: no_list (no --list)"
printf '*  ten\n' >"$tmp/bad-list"
rc=0
out=$(TPURT_TEST_LIST="$tmp/bad-list" runner "${fixture[@]}" 2>&1) || rc=$?
[ "$rc" -eq 2 ] || fail "a bad line in the list: exit $rc"
has "$out" "$tmp/bad-list:1: expected PATTERN SECONDS [whole]"
echo "check_runner: ok"
