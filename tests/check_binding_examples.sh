#!/usr/bin/env bash
# Each language's example (examples/<lang>) trains the demo's linear regression and must
# converge to the same answer as the C demo: the example exits nonzero otherwise. Then
# each language's mesh example (make example-<lang> runs both) sums over the "model" axis
# of a 2 x 2 mesh and must print both cores of replica 1 with 11 + 12 + 13 + 14.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${SANITIZE:-}" ]; then
  echo "check_binding_examples: run in the plain build (not under SANITIZE=$SANITIZE)"
  exit 0
fi
BUILD=${BUILD:-build}
# "max |diff| = X": the largest distance from the least-squares solution.
max_diff() { sed -n 's/.*max |diff| = \([-+0-9.eE]*\).*/\1/p' | head -n 1; }
want=$(cd "$root" && "$BUILD/bin/tpurt" demo -r 8 | max_diff)
[ -n "$want" ] || { echo "check_binding_examples: the C demo printed no max |diff|" >&2; exit 1; }
for lang in csharp java go; do
  out=$(make --no-print-directory -s -C "$root" BUILD="$BUILD" "example-$lang" 2>&1) ||
    { echo "$out" >&2; echo "check_binding_examples: example-$lang failed" >&2; exit 1; }
  grep -Eq '^replica 1: cores 0 and 1 got 50(\.0)? and 50(\.0)? ' <<<"$out" ||
    { echo "$out" >&2; echo "check_binding_examples: example-$lang's mesh step printed no right total for replica 1" >&2; exit 1; }
  got=$(max_diff <<<"$out")
  awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(a != "" && d * d < 1e-18) }' ||
    { echo "$out" >&2; echo "check_binding_examples: example-$lang ended $got from the solution, the C demo $want" >&2; exit 1; }
done

# Across tasks: `tpurt launch` runs the example as 2 tasks of 2 cores (4 global replicas);
# every task reports its own replicas and must reach the C demo's distance too.
# launch_check NAME COMMAND...: COMMAND runs the example already built above.
launch_check() {
  local name=$1
  shift
  local out
  out=$(cd "$root" && "$BUILD/bin/tpurt" launch -n 2 --cores-per-task 2 --timeout 120 -- "$@" 2>&1) ||
    { echo "$out" >&2; echo "check_binding_examples: $name under tpurt launch -n 2 failed" >&2; exit 1; }
  for task in 0 1; do
    got=$(grep "^\[$task\] " <<<"$out" | max_diff)
    awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(a != "" && d * d < 1e-18) }' ||
      { echo "$out" >&2; echo "check_binding_examples: $name task $task under tpurt launch ended '$got' from the solution, the C demo $want" >&2; exit 1; }
  done
}
build_dir=$(cd "$root" && cd "$BUILD" && pwd)  # BUILD may be relative to the root
cs_dir=$build_dir/bindings/csharp
launch_check "the C# example" env LD_LIBRARY_PATH="$cs_dir:$build_dir/lib" mono "$cs_dir/LinearRegression.exe"
java_dir=$build_dir/bindings/java
launch_check "the Java example" java -Djava.library.path="$java_dir/native" \
  -cp "$java_dir/tpurt.jar:$java_dir/example" LinearRegression
launch_check "the Go example" "$build_dir/bindings/go/example/example"

echo "check_binding_examples: C#, Java and Go train the demo's model to the C demo's answer, alone and as 2 tasks under tpurt launch, and sum over a 2 x 2 mesh's model axis"
