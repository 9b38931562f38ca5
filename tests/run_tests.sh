#!/usr/bin/env bash
# Runs the tests it is given (the Makefile passes its TEST_BINS and TEST_SCRIPTS):
# cmocka binaries, and *.sh check scripts run with bash. Each has a time limit; a
# listed binary that is missing fails. The last line sums the cmocka cases and scripts.
#   bash tests/run_tests.sh build/tests/test_tensor tests/check_header.sh
set -uo pipefail
if [ $# -eq 0 ]; then
  echo "usage: tests/run_tests.sh TEST... (make test passes the list)" >&2
  exit 2
fi
BUILD=${BUILD:-build}
LIMIT=${TPURT_TEST_TIMEOUT:-900}
passed=0
failed=0
failures=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run_binary() {
  local t=$1 name rc p f line
  name=$(basename "$t")
  echo "=== $name"
  if [ ! -x "$t" ]; then
    echo "run_tests: $t was not built" >&2
    failed=$((failed + 1))
    failures+=("$name (not built)")
    return
  fi
  timeout --kill-after=10 "$LIMIT" "$t" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  # Binaries that print their own "N passed, N failed" (vector checks) count by that line.
  if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -n "$line" ]; then
      p=$(echo "$line" | awk '{print $1}')
      f=$(echo "$line" | awk '{print $3}')
    fi
  fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$rc" -ne 0 ] && failures+=("$name (exit $rc)")
}

# A script counts as one test, or, if it prints "<lang>: N passed, N failed" lines (the
# bindings' suites), as the sum of those.
run_script() {
  local s=$1 name rc p f
  name=$(basename "$s")
  echo "=== $name"
  BUILD="$BUILD" SANITIZE="${SANITIZE:-}" timeout --kill-after=10 "$LIMIT" bash "$s" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  p=$(sed -n 's/^[A-Za-z#]*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  f=$(sed -n 's/^[A-Za-z#]*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log" | awk '{s+=$1} END {print s+0}')
  if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
    if [ "$rc" -eq 0 ]; then p=1; else f=1; fi
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$rc" -ne 0 ] && failures+=("$name (exit $rc)")
}

for t in "$@"; do
  case $t in
    *.sh) run_script "$t" ;;
    *) run_binary "$t" ;;
  esac
done

echo
for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
