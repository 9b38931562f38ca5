#!/usr/bin/env bash
# The bindings' overhead: one replicated step on 8 cores from C, C#, Java and Go, in one
# run: an empty step and a 1 MiB cross_replica_sum, median microseconds per step. Each
# binding runs its replicas on its own threads (tpu_step_join, the default) and, in the
# rows marked -callback, as callbacks from tpurt's workers; c-joined is C in the
# bindings' mode (8 C threads joined with tpu_step_join). C runs first and last, so its
# two rows show the run's noise. Prints a markdown table with
# each binding's difference (empty step) and ratio (1 MiB) against the first C row.
#   make bench-bindings        (builds the bindings first)
#   BUILD=build bash bench/bindings.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
mkdir -p "$BUILD/bench"
cc -O2 -Iinclude bench/bindings_c.c -o "$BUILD/bench/bindings_c" -pthread -L"$BUILD/lib" -ltpurt \
  -Wl,-rpath,"$(cd "$BUILD/lib" && pwd)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
JOINED=1 "$BUILD/bench/bindings_c" | tee -a "$out"
for lang in csharp java go; do
  make --no-print-directory -s BUILD="$BUILD" "bench-$lang" | grep -E "^$lang(-callback)? (empty_step_us|crs_1mib_us) " | tee -a "$out"
done
"$BUILD/bench/bindings_c" | sed 's/^c /c(again) /' | tee -a "$out"
echo
awk '
  { v[$1, $2] = $3; if (!($1 in seen)) { seen[$1] = 1; order[n++] = $1 } }
  END {
    ce = v["c", "empty_step_us"]; cs = v["c", "crs_1mib_us"]
    print "| from | empty step (µs) | vs C | 1 MiB cross_replica_sum step (µs) | vs C |"
    print "| --- | ---: | ---: | ---: | ---: |"
    for (i = 0; i < n; ++i) {
      l = order[i]; e = v[l, "empty_step_us"]; s = v[l, "crs_1mib_us"]
      printf "| %s | %.1f | %+.1f µs | %.0f | %.2fx |\n", l, e, e - ce, s, s / cs
    }
  }' "$out"
