#!/usr/bin/env bash
# Runs every test: the cmocka binaries in $BUILD/tests and the tests/check_*.sh
# scripts. Each has a time limit; the last line sums the cmocka cases and scripts.
set -uo pipefail
BUILD=${BUILD:-build}
LIMIT=${TPURT_TEST_TIMEOUT:-900}
passed=0
failed=0
failures=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  echo "=== $name"
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
done

for s in tests/check_*.sh; do
  [ -f "$s" ] || continue
  name=$(basename "$s")
  echo "=== $name"
  if BUILD="$BUILD" SANITIZE="${SANITIZE:-}" timeout --kill-after=10 "$LIMIT" bash "$s"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
  fi
done

echo
for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
