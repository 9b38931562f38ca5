#!/usr/bin/env bash
# Every libFuzzer target (tests/fuzz/fuzz.mk) for a few seconds (FUZZ_CHECK_TIME, 5
# by default): its seed corpus, crash-* files included, then what it finds from them.
# clang comes with tools/install-deps.sh, so a missing clang++ fails. Under SANITIZE
# it skips (the targets bring their own ASan and UBSan).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
time=${FUZZ_CHECK_TIME:-5}
if [ -n "${SANITIZE:-}" ]; then
  echo "check_fuzz: skipped under SANITIZE=$SANITIZE (the fuzzers bring their own ASan and UBSan)"
  exit 0
fi
if ! command -v clang++ >/dev/null 2>&1; then
  echo "check_fuzz: clang++ is missing: run tools/install-deps.sh" >&2
  exit 1
fi
make -s BUILD="$BUILD" fuzz-build >/dev/null
targets=$(make -s BUILD="$BUILD" --no-print-directory -f Makefile -f - <<<'print-fuzz-targets: ; @echo $(FUZZ_TARGETS)' print-fuzz-targets)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for t in $targets; do
  mkdir -p "$work/$t"
  if ! UBSAN_OPTIONS=print_stacktrace=1 "$BUILD/fuzz/fuzz_$t" -max_total_time="$time" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/" "$work/$t" \
      "tests/fuzz/corpus/$t" >"$work/$t.log" 2>&1; then
    tail -n 40 "$work/$t.log" >&2
    echo "check_fuzz: fuzz_$t FAILED (a crash, a leak or a hang; its input is above)" >&2
    failed=1
    continue
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log")
  echo "check_fuzz: fuzz_$t ran ${runs:-?} inputs in $time s without a crash, a leak or a hang"
done
exit $failed
