#!/usr/bin/env bash
# The public headers compile on their own, twice included, as strict C99 and as C++17,
# and every TPU_API function gets C linkage in C++ (an unmangled undefined symbol).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CC=${CC:-gcc}
CXX=${CXX:-g++}
CFLAGS_STRICT=(-std=c99 -Wall -Wextra -pedantic -Werror -Wstrict-prototypes)
CXXFLAGS_STRICT=(-std=c++17 -Wall -Wextra -pedantic -Werror)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

compile() {  # compile <label> <source> <compiler and flags...>
  local label=$1 src=$2
  shift 2
  if ! "$@" -Iinclude -c "$src" -o "$tmp/out.o" 2>"$tmp/err"; then
    echo "check_header: $label failed:" >&2
    cat "$tmp/err" >&2
    failed=1
  fi
}

for h in include/tpurt.h include/tpurt/*.h; do
  inc=${h#include/}
  printf '#include "%s"\n#include "%s"\n' "$inc" "$inc" >"$tmp/h.c"
  cp "$tmp/h.c" "$tmp/h.cc"
  compile "$inc as C99" "$tmp/h.c" "$CC" "${CFLAGS_STRICT[@]}"
  compile "$inc as C++17" "$tmp/h.cc" "$CXX" "${CXXFLAGS_STRICT[@]}"
done

# The options initialiser must name every field (-Wextra warns otherwise).
usage='#include "tpurt.h"
int tpurt_header_check(void);
int tpurt_header_check(void) {
  tpu_system_options options = TPU_SYSTEM_OPTIONS_INIT;
  return (int)options.struct_size;
}'
echo "$usage" >"$tmp/use.c"
echo "$usage" >"$tmp/use.cc"
compile "TPU_SYSTEM_OPTIONS_INIT as C99" "$tmp/use.c" "$CC" "${CFLAGS_STRICT[@]}"
compile "TPU_SYSTEM_OPTIONS_INIT as C++17" "$tmp/use.cc" "$CXX" "${CXXFLAGS_STRICT[@]}"

mapfile -t fns < <(bash tests/list_api_functions.sh)
{
  echo '#include "tpurt.h"'
  echo 'typedef void (*any_fn)(void);'
  echo 'extern const any_fn tpurt_every_function[];'
  echo 'const any_fn tpurt_every_function[] = {'
  printf '  reinterpret_cast<any_fn>(&%s),\n' "${fns[@]}"
  echo '};'
} >"$tmp/linkage.cc"
compile "C linkage of every function" "$tmp/linkage.cc" "$CXX" "${CXXFLAGS_STRICT[@]}"
if [ "$failed" -eq 0 ]; then
  undefined=$(nm -u "$tmp/out.o" | awk '{print $NF}' | sort)
  for f in "${fns[@]}"; do
    grep -qx "$f" <<<"$undefined" || {
      echo "check_header: $f has no C linkage in C++ (missing extern \"C\"?)" >&2
      failed=1
    }
  done
fi

[ "$failed" -eq 0 ] && echo "check_header: ${#fns[@]} functions; every header OK as C99 and C++17"
exit "$failed"
