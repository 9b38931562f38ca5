#!/usr/bin/env bash
# Every TPU_API function must be exercised by tests/test_null_args.c, so a new
# function cannot skip the NULL-argument test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
src=tests/test_null_args.c
[ -f "$src" ] || { echo "check_null_args_coverage: $src is missing" >&2; exit 1; }
missing=()
while read -r f; do
  grep -qw -- "$f" "$src" || missing+=("$f")
done < <(bash tests/list_api_functions.sh)
if [ ${#missing[@]} -gt 0 ]; then
  echo "check_null_args_coverage: not called in $src:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi
echo "check_null_args_coverage: every public function is in $src"
