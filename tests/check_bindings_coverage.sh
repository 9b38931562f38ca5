#!/usr/bin/env bash
# Every C ABI function is reachable from every language: bindings/api_map.txt names, for
# each TPU_API function, the support-layer member that calls it; the member must exist in
# the support layer (bindings/support/*.hpp, under bindings/tpurt_binding.hpp) and each language's tests must call it (by its name in any
# case, e.g. AllGather or allGather; Go's spellings RawX, RawClassX, XClass (ParseTopology)
# and NewClass for constructors count too).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
map=bindings/api_map.txt
support=(bindings/support/*.hpp)
errors=()

# The umbrella header includes every support header, and tpurt.i %includes every one
# (SWIG does not follow #include: a header missing there is missing from every language).
for h in "${support[@]}"; do
  grep -q "^#include \"support/${h##*/}\"" bindings/tpurt_binding.hpp || errors+=("bindings/tpurt_binding.hpp does not include $h")
  grep -q "^%include \"support/${h##*/}\"" bindings/tpurt.i || errors+=("bindings/tpurt.i does not %include $h")
done
declare -A member_of
while read -r fn member; do
  [ -z "$fn" ] || [[ $fn == \#* ]] && continue
  member_of[$fn]=$member
done <"$map"

while read -r fn; do
  [ -n "${member_of[$fn]:-}" ] || errors+=("$fn is not in $map")
done < <(bash tests/list_api_functions.sh)

declare -A test_dirs=([csharp]=bindings/csharp/tests [java]=bindings/java/tests [go]=bindings/go)
for fn in "${!member_of[@]}"; do
  member=${member_of[$fn]}
  name=${member##*.}
  class=${member%.*}
  [ "$class" = "$member" ] && class=
  spellings="$name|raw$name|raw$class$name|$name$class|new$name"
  grep -qw -- "$fn" "${support[@]}" || errors+=("$map: no support member calls $fn")
  grep -qw -- "$name" "${support[@]}" || errors+=("$map: $member is not in bindings/support")
  for lang in "${!test_dirs[@]}"; do
    dir=${test_dirs[$lang]}
    files=$(find "$dir" -name '*_test.go' -o -name '*Test*.cs' -o -name '*Test*.java' -o -name '*Tests.cs' 2>/dev/null || true)
    if [ -z "$files" ]; then
      errors+=("$lang: no test sources under $dir")
      continue
    fi
    # shellcheck disable=SC2086
    grep -qiwE -- "$spellings" $files || errors+=("$lang tests never call $member (for $fn)")
  done
done

if [ ${#errors[@]} -gt 0 ]; then
  printf 'check_bindings_coverage: %s\n' "${errors[@]}" | sort -u >&2
  exit 1
fi
echo "check_bindings_coverage: ${#member_of[@]} C functions, each called from the C#, Java and Go tests"
