#!/usr/bin/env bash
# Each language's example (examples/<lang>) trains the demo's linear regression and must
# converge to the same answer as the C demo: the example exits nonzero otherwise.
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
  got=$(max_diff <<<"$out")
  awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(a != "" && d * d < 1e-18) }' ||
    { echo "$out" >&2; echo "check_binding_examples: example-$lang ended $got from the solution, the C demo $want" >&2; exit 1; }
done
echo "check_binding_examples: C#, Java and Go train the demo's model to the C demo's answer"
