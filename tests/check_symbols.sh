#!/usr/bin/env bash
# The built libraries: SONAME libtpurt.so.<major>, the symlink chain
# libtpurt.so -> libtpurt.so.<major> -> libtpurt.so.<version>, libtpurt.a, and a
# dynamic symbol table holding exactly the functions the headers declare TPU_API.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
lib=$BUILD/lib
failed=0
err() { echo "check_symbols: $*" >&2; failed=1; }

version_part() { sed -n "s/^#define TPU_VERSION_$1 \([0-9][0-9]*\).*/\1/p" include/tpurt/common.h; }
major=$(version_part MAJOR)
version=$major.$(version_part MINOR).$(version_part PATCH)
real=$lib/libtpurt.so.$version

[ -f "$real" ] && [ ! -L "$real" ] || { err "$real is missing (or not a regular file)"; exit 1; }
[ -f "$lib/libtpurt.a" ] || err "$lib/libtpurt.a is missing"
[ "$(readlink "$lib/libtpurt.so.$major" || true)" = "libtpurt.so.$version" ] ||
  err "$lib/libtpurt.so.$major is not a symlink to libtpurt.so.$version"
[ "$(readlink "$lib/libtpurt.so" || true)" = "libtpurt.so.$major" ] ||
  err "$lib/libtpurt.so is not a symlink to libtpurt.so.$major"

soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$soname" = "libtpurt.so.$major" ] || err "SONAME is '$soname', expected libtpurt.so.$major"

# Symbol names without any @VERSION suffix.
exported=$(nm -D --defined-only "$real" | awk '{print $NF}' | sed 's/@.*//' | sort -u)
offenders=$(grep -v '^tpu_' <<<"$exported" || true)
[ -z "$offenders" ] || err "exported symbols that are not tpu_*:"$'\n'"$offenders"

declared=$(bash tests/list_api_functions.sh)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
[ -z "$missing" ] || err "declared TPU_API but not exported by $real:"$'\n'"$missing"
extra=$(comm -13 <(echo "$declared") <(grep '^tpu_' <<<"$exported" || true))
[ -z "$extra" ] || err "exported tpu_* symbols that no header declares:"$'\n'"$extra"

# The static library must define the same API (it is what a static link gets).
static=$(nm --defined-only "$lib/libtpurt.a" 2>/dev/null | awk '$2 == "T" {print $3}' | sort -u)
missing_static=$(comm -23 <(echo "$declared") <(echo "$static"))
[ -z "$missing_static" ] || err "declared but not defined in libtpurt.a:"$'\n'"$missing_static"

# The Debian symbols file names every export (a new one without its line makes make deb
# fail lintian): add " tpu_new@Base <version>" to packaging/debian/libtpurt1.symbols.
symbols_file=packaging/debian/libtpurt1.symbols
listed=$(awk '/^ / { sub(/@.*/, "", $1); print $1 }' "$symbols_file" | sort -u)
unlisted=$(comm -23 <(echo "$declared") <(echo "$listed"))
[ -z "$unlisted" ] || err "exported but not in $symbols_file:"$'\n'"$unlisted"
stale=$(comm -13 <(echo "$declared") <(echo "$listed"))
[ -z "$stale" ] || err "in $symbols_file but not exported:"$'\n'"$stale"

[ "$failed" -eq 0 ] &&
  echo "check_symbols: SONAME $soname, symlinks and libtpurt.a OK;" \
       "$(wc -l <<<"$declared") tpu_* functions exported, nothing else"
exit "$failed"
