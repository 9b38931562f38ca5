#!/usr/bin/env bash
# The tpurt command and the example, as a user runs them: demo converges, info
# prints the topology, every collective's bench run checks out with no wrong
# elements, and the example prints the sums.
set -euo pipefail
BUILD=${BUILD:-build}
TPURT=$BUILD/bin/tpurt
fail() { echo "check_tool: $*" >&2; exit 1; }

out=$("$TPURT" demo --cores 3 --steps 100) || fail "tpurt demo failed: $out"
grep -q '^demo: OK' <<<"$out" || fail "demo did not converge: $(tail -3 <<<"$out")"

out=$("$TPURT" info --cores 4 --mesh 2,1,1,2)
grep -q '/job:localhost/replica:0/task:0/device:TPU:3' <<<"$out" || fail "info lacks device 3: $out"

for c in all_reduce all_gather reduce_scatter all_to_all collective_permute broadcast; do
  for d in float32 bfloat16 int32; do
    rows=$("$TPURT" bench -c "$c" -d "$d" -r 3 -b 8 -e 64K -f 16 -n 5 --csv 2>/dev/null) ||
      fail "bench -c $c -d $d failed"
    # The #wrong column is last; every data row must have 0 there.
    wrong=$(grep -v '^#' <<<"$rows" | tail -n +2 | awk -F, '$NF != 0' | wc -l)
    [ "$wrong" -eq 0 ] || fail "bench -c $c -d $d reported wrong elements: $rows"
  done
done

rc=0
"$TPURT" bench -c no_such_collective >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "bench with an unknown collective exited $rc, not 2 (bad usage)"

out=$(TPURT_NUM_CORES=4 "$BUILD/examples/hello_replicate")
grep -q '^replica 3: \[10, 20, 30, 40\]$' <<<"$out" || fail "example printed: $out"
echo "check_tool: demo, info, bench of 6 collectives x 3 dtypes, example OK"
