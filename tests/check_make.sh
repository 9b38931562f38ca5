#!/usr/bin/env bash
# The Makefile as a packager drives it: the user's CFLAGS/CXXFLAGS/CPPFLAGS/LDFLAGS
# add to the project's flags (-std and the visibility stay); `clean` removes BUILD
# and nothing else; a missing package stops `make` with its name and the command that
# installs it, and make never runs apt-get itself.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_make: $*" >&2; exit 1; }
# Variables given to an outer `make test` must not leak into the makes run here.
unset MAKEFLAGS MFLAGS BUILD SANITIZE

# --- user flags -------------------------------------------------------------------
# CFLAGS from the environment (as dpkg-buildpackage exports them), the rest on the
# command line; -n -B prints every command of a full build.
cmds=$(CFLAGS="-O0 -DUSER_CFLAGS" make -n -B --no-print-directory BUILD="$tmp/flags" \
         CXXFLAGS="-O0 -DUSER_CXXFLAGS" CPPFLAGS="-DUSER_CPPFLAGS -I/user/include" \
         LDFLAGS="-Wl,-O1 -L/user/lib" lib tool |
       sed -e ':a' -e '/\\$/N; s/\\\n//; ta')  # one line per command
cxx_compiles=$(grep -E '^(g\+\+|c\+\+|clang\+\+).* -c ' <<<"$cmds" || true)
[ -n "$cxx_compiles" ] || fail "no C++ compile commands in make -n output"
while read -r line; do
  for flag in -std=c++17 -fvisibility=hidden -DUSER_CXXFLAGS -DUSER_CPPFLAGS; do
    [[ " $line " == *" $flag "* ]] || fail "C++ compile lacks $flag: $line"
  done
  # The user's -O0 comes after the project's -O2, so it is the one that counts.
  [[ "$line" == *-O2*-O0* ]] || fail "the user's -O0 does not follow -O2: $line"
  # A tpurt.h installed in the user's include path must not shadow the tree's.
  [[ "$line" == *" -Iinclude "*" -I/user/include "* ]] || fail "the user's -I precedes -Iinclude: $line"
done <<<"$cxx_compiles"
tool_line=$(grep -- "-o $tmp/flags/bin/tpurt " <<<"$cmds") || fail "no link command for the tool"
for flag in -std=c11 -DUSER_CFLAGS -DUSER_CPPFLAGS -Wl,-O1; do
  [[ " $tool_line " == *" $flag "* ]] || fail "tool build lacks $flag: $tool_line"
done
# The libtpurt.so just built, not one installed in the user's library path.
[[ "$tool_line" == *" -L$tmp/flags/lib "*" -L/user/lib "* ]] || fail "the user's -L comes first: $tool_line"
shlib_line=$(grep -- "-shared" <<<"$cmds") || fail "no link command for libtpurt.so"
[[ "$shlib_line" == *" -Wl,-O1 "* ]] || fail "libtpurt.so link lacks the user's LDFLAGS: $shlib_line"

# --- clean honours BUILD ----------------------------------------------------------
mkdir -p "$tmp/b/obj" "$tmp/keep"
make --no-print-directory -s clean BUILD="$tmp/b"
[ ! -e "$tmp/b" ] || fail "make clean BUILD=$tmp/b left $tmp/b"
[ -d "$tmp/keep" ] || fail "make clean removed more than BUILD"
[ "$(make -n --no-print-directory clean SANITIZE=address)" = "rm -rf build/address" ] ||
  fail "make clean SANITIZE=address does not remove just build/address"

# --- missing packages ---------------------------------------------------------------
# No pkg-config module is found, and apt-get, sudo are stand-ins that record a call.
mkdir -p "$tmp/bin" "$tmp/no-modules"
for tool in apt-get sudo; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/called"\n' "$tool" "$tmp" >"$tmp/bin/$tool"
  chmod +x "$tmp/bin/$tool"
done
rc=0
PATH="$tmp/bin:$PATH" PKG_CONFIG_LIBDIR="$tmp/no-modules" PKG_CONFIG_PATH= \
  make --no-print-directory BUILD="$tmp/deps" lib >"$tmp/out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "make succeeded with no pkg-config modules"
for want in libprotobuf-c-dev libcmocka-dev libjansson-dev tools/install-deps.sh; do
  grep -q -- "$want" "$tmp/out" || fail "make's message does not name $want: $(cat "$tmp/out")"
done
[ ! -e "$tmp/called" ] || fail "make ran $(cat "$tmp/called")"
[ ! -e "$tmp/deps/obj" ] || fail "make compiled although packages are missing"

echo "check_make: user flags add to the project's, clean honours BUILD, missing packages named"
