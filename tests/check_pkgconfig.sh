#!/usr/bin/env bash
# `make install` into a temporary prefix, then a small C program built with nothing
# but `pkg-config --cflags --libs tpurt` runs against the installed library;
# `make uninstall` removes every installed file. The same with DESTDIR staging.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
SANITIZE=${SANITIZE:-}
CC=${CC:-gcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "check_pkgconfig: $*" >&2; exit 1; }
# BUILD and SANITIZE are passed on so that install takes the library just built.
mk() { make --no-print-directory -s BUILD="$BUILD" SANITIZE="$SANITIZE" "$@" >"$tmp/make.log" 2>&1 ||
         { cat "$tmp/make.log" >&2; fail "make $* failed"; }; }

version_part() { sed -n "s/^#define TPU_VERSION_$1 \([0-9][0-9]*\).*/\1/p" include/tpurt/common.h; }
major=$(version_part MAJOR)
version=$major.$(version_part MINOR).$(version_part PATCH)
expected_files() {  # the files install must create under $1
  echo "$1/include/tpurt.h"
  for h in include/tpurt/*.h; do echo "$1/$h"; done
  printf '%s\n' "$1/lib/libtpurt.so" "$1/lib/libtpurt.so.$major" "$1/lib/libtpurt.so.$version" \
    "$1/lib/libtpurt.a" "$1/lib/pkgconfig/tpurt.pc"
}
installed_files() { find "$1" \( -type f -o -type l \) 2>/dev/null | sort; }

cat >"$tmp/prog.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <tpurt.h>

int main(void) {
  const int64_t dims[2] = {2, 3};
  const float data[6] = {1, 2, 3, 4, 5, 6};
  tpu_tensor *t = NULL;
  const char *name = NULL;
  int64_t n = 0;
  if (tpu_tensor_create(TPU_FLOAT, dims, 2, data, sizeof data, &t) != TPU_OK ||
      tpu_tensor_num_elements(t, &n) != TPU_OK || n != 6) {
    fprintf(stderr, "tensor: %s\n", tpu_last_error());
    return 1;
  }
  tpu_tensor_release(t);
  if (tpu_dtype_name(TPU_BFLOAT16, &name) != TPU_OK || strcmp(name, "bfloat16") != 0) return 2;
  if (strcmp(tpu_status_name(TPU_INVALID_ARGUMENT), "INVALID_ARGUMENT") != 0) return 3;
  printf("tpurt %s\n", tpu_version());
  return 0;
}
EOF

# --- make install PREFIX=... ---------------------------------------------------
prefix=$tmp/prefix
mk install PREFIX="$prefix" DESTDIR=
while read -r f; do
  [ -e "$f" ] || fail "make install did not create $f"
done < <(expected_files "$prefix")
[ "$(readlink "$prefix/lib/libtpurt.so")" = "libtpurt.so.$major" ] ||
  fail "installed libtpurt.so is not a symlink to libtpurt.so.$major"
[ "$(readlink "$prefix/lib/libtpurt.so.$major")" = "libtpurt.so.$version" ] ||
  fail "installed libtpurt.so.$major is not a symlink to libtpurt.so.$version"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion tpurt)" = "$version" ] || fail "pkg-config --modversion is not $version"
[ "$(pkg-config --variable=prefix tpurt)" = "$prefix" ] || fail "tpurt.pc prefix is not $prefix"

# A sanitized library needs its runtime loaded first, so only then does the
# program get the sanitizer flag as well.
extra=()
[ -z "$SANITIZE" ] || extra=(-fsanitize="$SANITIZE")
# shellcheck disable=SC2046  # pkg-config's output is a list of words
(cd "$tmp" && "$CC" -std=c99 -Wall -Wextra -Werror -o prog prog.c $(pkg-config --cflags --libs tpurt) \
  "${extra[@]}") || fail "building with pkg-config --cflags --libs tpurt failed"
ldd_line=$(LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/prog" | grep libtpurt || true)
[[ "$ldd_line" == *"$prefix/lib/libtpurt.so.$major"* ]] ||
  fail "prog does not load the installed libtpurt.so.$major: $ldd_line"
out=$(LD_LIBRARY_PATH=$prefix/lib "$tmp/prog") || fail "prog failed (exit $?)"
[ "$out" = "tpurt $version" ] || fail "prog printed '$out'"

# Static linking: `pkg-config --static` must name everything libtpurt.a needs
# (-l:libtpurt.a makes the linker take the archive although the .so is there).
# shellcheck disable=SC2046
(cd "$tmp" && "$CC" -std=c99 -Wall -Wextra -Werror -o prog_static prog.c \
  $(pkg-config --cflags tpurt) $(pkg-config --static --libs tpurt | sed 's/-ltpurt\b/-l:libtpurt.a/') \
  "${extra[@]}") || fail "static linking with pkg-config --static --libs tpurt failed"
! ldd "$tmp/prog_static" | grep -q libtpurt || fail "prog_static still loads libtpurt.so"
out=$("$tmp/prog_static") || fail "prog_static failed (exit $?)"
[ "$out" = "tpurt $version" ] || fail "prog_static printed '$out'"

mk uninstall PREFIX="$prefix" DESTDIR=
left=$(installed_files "$prefix")
[ -z "$left" ] || fail "make uninstall left:"$'\n'"$left"

# --- make install PREFIX=... DESTDIR=... ----------------------------------------
# The prefix recorded in tpurt.pc is PREFIX; the files land under DESTDIR.
stage=$tmp/stage
staged_prefix=/opt/tpurt-check-$$
mk install PREFIX="$staged_prefix" DESTDIR="$stage"
[ ! -e "$staged_prefix" ] || fail "install with DESTDIR wrote to $staged_prefix"
while read -r f; do
  [ -e "$f" ] || fail "make install DESTDIR=... did not create $f"
done < <(expected_files "$stage$staged_prefix")
grep -qx "prefix=$staged_prefix" "$stage$staged_prefix/lib/pkgconfig/tpurt.pc" ||
  fail "staged tpurt.pc does not say prefix=$staged_prefix"
unexpected=$(comm -13 <(expected_files "$stage$staged_prefix" | sort) <(installed_files "$stage") |
             grep -v "^$stage$staged_prefix/bin/tpurt$" || true)
[ -z "$unexpected" ] || fail "install created unexpected files:"$'\n'"$unexpected"
mk uninstall PREFIX="$staged_prefix" DESTDIR="$stage"
left=$(installed_files "$stage")
[ -z "$left" ] || fail "make uninstall DESTDIR=... left:"$'\n'"$left"

echo "check_pkgconfig: install, pkg-config build and run (shared and static), uninstall, DESTDIR staging OK"
