#!/usr/bin/env bash
# The wire fuzzer (tests/fuzz/fuzz_wire.cc) for a short bounded run when clang is
# here: libFuzzer with ASan over the seed corpus and what it finds in 20 s. Without
# clang it says so and passes (tests/test_wire_corpus replays the corpus either way).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "check_fuzz: skipped: clang++ is not installed (the corpus replay ran in test_wire_corpus)"
  exit 0
fi
if [ -n "${SANITIZE:-}" ]; then
  echo "check_fuzz: skipped under SANITIZE=$SANITIZE (the fuzzer brings its own ASan)"
  exit 0
fi
make -s BUILD="$BUILD" fuzz >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BUILD/fuzz/fuzz_wire" -max_total_time=20 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  "$work" tests/fuzz/corpus/wire >"$work.log" 2>&1 || { tail -n 40 "$work.log" >&2; rm -f "$work.log"; exit 1; }
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log")
rm -f "$work.log"
echo "check_fuzz: fuzz_wire ran ${runs:-?} inputs in 20 s without a crash, a leak or a hang"
