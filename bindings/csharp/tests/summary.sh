#!/bin/bash
# Prints "csharp: N passed, N failed" from NUnit 2.6's TestResult.xml; exits nonzero on
# any failure, a missing result file or a runner that did not finish.
result=$1 runner_status=$2
if [ ! -f "$result" ]; then
  echo "csharp: 0 passed, 1 failed"; exit 1
fi
root=$(grep -m1 -o '<test-results [^>]*' "$result")
attr() { echo "$root" | grep -o " $1=\"[0-9]*\"" | grep -o '[0-9]*'; }
total=$(attr total) failures=$(attr failures) errors=$(attr errors)
failed=$((failures + errors))
echo "csharp: $((total - failed)) passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$runner_status" -eq 0 ]
