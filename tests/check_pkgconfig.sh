#!/usr/bin/env bash
# `make install` as a user of the library meets it, in temporary prefixes:
# - it installs the headers, libraries (the MPI plugin when built), tpurt.pc and tpurt-static.pc, the tpurt tool,
#   its man page (a section for every command `tpurt --help` lists, documenting every option of that
#   command's usage, and every variable `tpurt info` shows), LICENSE/CHANGELOG;
# - a program built with `pkg-config --cflags --libs tpurt` runs (LD_LIBRARY_PATH or an
#   rpath, as for any prefix the loader does not search);
# - static links: tpurt-static.pc (libtpurt.a, system libraries shared) and
#   `cc -static ... $(pkg-config --static --libs tpurt)` (all static) need no libtpurt.so;
# - ldconfig runs only when the loader searches LIBDIR, never with DESTDIR; for another
#   LIBDIR install prints the one line that builds a program that runs, and it does;
# - a binding that was not built is not built or installed (INSTALL_BINDINGS=auto);
# - uninstall removes every file and exactly the directories install created.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
SANITIZE=${SANITIZE:-}
CC=${CC:-gcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "check_pkgconfig: $*" >&2; exit 1; }

# A stand-in for ldconfig: logs its calls; asked for the loader's directories (-vNX)
# it names $FAKE_SYSTEM_LIBDIR, so a temporary prefix can play the system's.
cat >"$tmp/ldconfig" <<EOF
#!/bin/sh
echo "\$*" >>"$tmp/ldconfig.log"
if [ "\$1" = -vNX ] && [ -n "\${FAKE_SYSTEM_LIBDIR:-}" ]; then echo "\$FAKE_SYSTEM_LIBDIR: (from fake)"; fi
EOF
chmod +x "$tmp/ldconfig"
: >"$tmp/ldconfig.log"
ldconfig_runs() { grep -cvx -- -vNX "$tmp/ldconfig.log" 2>/dev/null || true; }  # calls that rebuild

# BUILD and SANITIZE are passed on so that install takes the library just built; the
# bindings' install is checked by check_bindings_install.sh.
mk_default() { make --no-print-directory -s BUILD="$BUILD" SANITIZE="$SANITIZE" LDCONFIG="$tmp/ldconfig" "$@" \
         >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log" >&2; fail "make $* failed"; }; }
mk() { mk_default INSTALL_BINDINGS=no "$@"; }

version_part() { sed -n "s/^#define TPU_VERSION_$1 \([0-9][0-9]*\).*/\1/p" include/tpurt/common.h; }
major=$(version_part MAJOR)
version=$major.$(version_part MINOR).$(version_part PATCH)
expected_files() {  # the files install must create under $1
  echo "$1/include/tpurt.h"
  for h in include/tpurt/*.h; do echo "$1/$h"; done
  printf '%s\n' "$1/lib/libtpurt.so" "$1/lib/libtpurt.so.$major" "$1/lib/libtpurt.so.$version" \
    "$1/lib/libtpurt.a" "$1/lib/pkgconfig/tpurt.pc" "$1/lib/pkgconfig/tpurt-static.pc" \
    "$1/bin/tpurt" "$1/share/man/man1/tpurt.1" "$1/share/doc/tpurt/LICENSE"
  [ ! -f CHANGELOG.md ] || echo "$1/share/doc/tpurt/CHANGELOG.md"
  [ ! -e "$BUILD/lib/libtpurt_mpi.so" ] || echo "$1/lib/libtpurt_mpi.so"  # when make mpi built it
}
check_installed() {  # check_installed <dir> [files of others]: the expected files, no others
  local f unexpected dir=$1
  shift
  while read -r f; do
    [ -e "$f" ] || fail "make install did not create $f"
  done < <(expected_files "$dir")
  unexpected=$(comm -13 <({ expected_files "$dir"; echo "$dir/share/doc/tpurt/installed-dirs";
                            printf '%s\n' "$@"; } | sort) <(find "$dir" \( -type f -o -type l \) | sort))
  [ -z "$unexpected" ] || fail "install created unexpected files:"$'\n'"$unexpected"
}

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

# A sanitized library needs its runtime loaded first, so only then does the
# program get the sanitizer flag as well.
san=()
[ -z "$SANITIZE" ] || san=(-fsanitize="$SANITIZE")
build_prog() {  # build_prog <output> <compiler flags...>
  local out=$1
  shift
  (cd "$tmp" && "$CC" -std=c99 -Wall -Wextra -Werror -o "$out" prog.c "$@" "${san[@]}")
}
runs_ok() {  # runs_ok <label> <command...>: the program prints the version
  local label=$1 out
  shift
  out=$("$@") || fail "$label failed (exit $?)"
  [ "$out" = "tpurt $version" ] || fail "$label printed '$out'"
}
needs_libtpurt_so() { readelf -d "$1" 2>/dev/null | grep NEEDED | grep -q libtpurt; }

# --- make install PREFIX=<a new directory> ---------------------------------------
prefix=$tmp/prefix
mk install PREFIX="$prefix" DESTDIR=
check_installed "$prefix"
[ "$(readlink "$prefix/lib/libtpurt.so")" = "libtpurt.so.$major" ] ||
  fail "installed libtpurt.so is not a symlink to libtpurt.so.$major"
[ "$(readlink "$prefix/lib/libtpurt.so.$major")" = "libtpurt.so.$version" ] ||
  fail "installed libtpurt.so.$major is not a symlink to libtpurt.so.$version"
[ "$(ldconfig_runs)" -eq 0 ] || fail "install into $prefix (not a loader directory) ran ldconfig"
# ... so install prints the one line that builds a program that runs from there.
hint=$(sed -n 's/^.* is not searched by the loader; build programs with: //p' "$tmp/make.log")
[ -n "$hint" ] || fail "install into $prefix printed no line for the loader:"$'\n'"$(cat "$tmp/make.log")"
(cd "$tmp" && eval "${hint/prog.c/prog.c -o prog_hinted ${san[*]}}") || fail "the printed line failed: $hint"
runs_ok "prog built by the line install printed" env -u LD_LIBRARY_PATH "$tmp/prog_hinted"

# The installed tool finds the installed library by itself, and its man page
# documents what the tool's usages list: every command `tpurt --help` names has its
# section (.SS) and SYNOPSIS line, and each option of `tpurt CMD --help` is in CMD's
# section (-h/--help, common to all, anywhere); every variable `tpurt info` shows is
# in ENVIRONMENT. So an option or variable added without its documentation fails here.
runs_ok "installed tpurt version" sh -c "'$prefix/bin/tpurt' version | sed 's/ (runtime.*//'"
tool=$prefix/bin/tpurt
# The page's source without font changes, \- as -.
man_text=$(sed -e 's/\\f[BIRP]//g' -e 's/\\f\[[^]]*\]//g' -e 's/\\-/-/g' -e 's/\\&//g' \
             "$prefix/share/man/man1/tpurt.1")
man_part() {  # man_part <.SH or .SS line>: from that line to the next .SH or .SS
  awk -v head="$1" '$0 == head {on = 1; next} /^\.S[HS]( |$)/ {on = 0} on' <<<"$man_text"
}
options_of() { grep -oE -- '(^|[ ,])--?[a-z][a-z-]*' | tr -d ' ,' | sort -u; }
has_option() {  # has_option <text> <option>: the option as a whole word
  grep -qE -- "(^|[^[:alnum:]-])$2([^[:alnum:]-]|\$)" <<<"$1"
}
overview=$("$tool" --help)
for opt in $(options_of <<<"$overview"); do
  has_option "$man_text" "$opt" || fail "tpurt.1 does not document $opt (in tpurt --help)"
done
commands=$(sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' <<<"$overview")
[ -n "$commands" ] || fail "tpurt --help lists no commands"
synopsis=$(man_part ".SH SYNOPSIS")
for cmd in $commands; do
  grep -qE "^\.B tpurt $cmd( |\$)" <<<"$synopsis" || fail "tpurt.1's SYNOPSIS lacks tpurt $cmd"
  section=$(man_part ".SS $cmd")
  [ -n "$section" ] || fail "tpurt.1 has no section .SS $cmd (a command of tpurt --help)"
  [ "$cmd" != version ] || continue  # main.c's own command: no usage, it prints versions
  usage=$("$tool" "$cmd" --help) || fail "tpurt $cmd --help failed"
  [[ "$usage" == "usage: tpurt $cmd "* ]] || fail "tpurt $cmd --help printed no usage: $usage"
  for opt in $(options_of <<<"$usage"); do
    case $opt in
      -h | --help) has_option "$man_text" "$opt" ;;
      *) has_option "$section" "$opt" ;;
    esac || fail "tpurt.1's section on $cmd does not document $opt (in tpurt $cmd --help)"
  done
done
# One core, with no launcher's variables: a one-process system whatever the caller's.
vars=$(env -u DTENSOR_JOBS -u TF_CONFIG -u SLURM_JOB_ID -u OMPI_COMM_WORLD_SIZE -u TPU_NAME \
         -u KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS "$tool" info --cores 1 |
       sed -n '/^Environment/,/^$/s/^  \(TPURT_[A-Z0-9_]*\) .*/\1/p')
[ -n "$vars" ] || fail "tpurt info showed no environment variables"
environment=$(sed -n '/^\.SH ENVIRONMENT$/,/^\.SH /p' <<<"$man_text")  # with its subsections
for var in $vars; do
  grep -qx "\.B $var" <<<"$environment" || fail "tpurt.1's ENVIRONMENT does not document $var (in tpurt info)"
done
if command -v groff >/dev/null; then
  warnings=$(groff -man -ww -z "$prefix/share/man/man1/tpurt.1" 2>&1)
  [ -z "$warnings" ] || fail "tpurt.1: groff warns: $warnings"
fi

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion tpurt)" = "$version" ] || fail "pkg-config --modversion is not $version"
[ "$(pkg-config --variable=prefix tpurt)" = "$prefix" ] || fail "tpurt.pc prefix is not $prefix"
libdir=$(pkg-config --variable=libdir tpurt)
[ "$libdir" = "$prefix/lib" ] || fail "tpurt.pc libdir is $libdir, not $prefix/lib"

# Shared, as the README says; a prefix the loader does not search needs
# LD_LIBRARY_PATH or an rpath.
# shellcheck disable=SC2046  # pkg-config's output is a list of words
build_prog prog $(pkg-config --cflags --libs tpurt) ||
  fail "building with pkg-config --cflags --libs tpurt failed"
ldd_line=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/prog" | grep libtpurt || true)
[[ "$ldd_line" == *"$libdir/libtpurt.so.$major"* ]] ||
  fail "prog does not load the installed libtpurt.so.$major: $ldd_line"
runs_ok "prog with LD_LIBRARY_PATH" env LD_LIBRARY_PATH="$libdir" "$tmp/prog"
# shellcheck disable=SC2046
build_prog prog_rpath $(pkg-config --cflags --libs tpurt) -Wl,-rpath,"$libdir" ||
  fail "building with an rpath failed"
runs_ok "prog with -Wl,-rpath,$libdir" env -u LD_LIBRARY_PATH "$tmp/prog_rpath"

# Static tpurt, shared system libraries: tpurt-static.pc names libtpurt.a by its path.
# shellcheck disable=SC2046
build_prog prog_static $(pkg-config --cflags --libs tpurt-static) ||
  fail "building with pkg-config --cflags --libs tpurt-static failed"
! needs_libtpurt_so "$tmp/prog_static" || fail "prog_static (tpurt-static.pc) needs libtpurt.so"
runs_ok "prog_static" env -u LD_LIBRARY_PATH "$tmp/prog_static"

# All static: what `pkg-config --static` is for (no sanitizer runtime links statically).
if [ -z "$SANITIZE" ]; then
  # shellcheck disable=SC2046
  build_prog prog_all_static -static $(pkg-config --static --cflags --libs tpurt) ||
    fail "building with cc -static \$(pkg-config --static --cflags --libs tpurt) failed"
  ! readelf -d "$tmp/prog_all_static" 2>/dev/null | grep -q NEEDED ||
    fail "prog_all_static needs shared libraries: $(readelf -d "$tmp/prog_all_static" | grep NEEDED)"
  runs_ok "prog_all_static" "$tmp/prog_all_static"
fi

# A second install over the first, then uninstall: nothing is left, not even the
# directories, since install made them all.
mk install PREFIX="$prefix" DESTDIR=
mk uninstall PREFIX="$prefix" DESTDIR=
[ ! -e "$prefix" ] || fail "make uninstall left:"$'\n'"$(find "$prefix")"
[ "$(ldconfig_runs)" -eq 0 ] || fail "uninstall from $prefix ran ldconfig"

# --- a prefix whose directories exist, with files of others -----------------------
# Uninstall removes what it made and leaves the rest; here the prefix plays the
# system's, so ldconfig runs after install and after uninstall.
sys=$tmp/sys
mkdir -p "$sys/bin" "$sys/lib" "$sys/share/man"
touch "$sys/bin/other-tool"
FAKE_SYSTEM_LIBDIR=$sys/lib mk install PREFIX="$sys" DESTDIR=
check_installed "$sys" "$sys/bin/other-tool"
[ "$(ldconfig_runs)" -eq 1 ] || fail "install into a loader directory did not run ldconfig once"
! grep -q 'not searched by the loader' "$tmp/make.log" || fail "install into a loader directory printed the rpath line"
FAKE_SYSTEM_LIBDIR=$sys/lib mk uninstall PREFIX="$sys" DESTDIR=
[ "$(ldconfig_runs)" -eq 2 ] || fail "uninstall from a loader directory did not run ldconfig"
left=$(cd "$sys" && find . | sort | tr '\n' ' ')
[ "$left" = ". ./bin ./bin/other-tool ./lib ./share ./share/man " ] ||
  fail "uninstall should leave the directories that were there and no more; left: $left"

# --- By default a binding not built is neither built nor installed (here none counts
# as built: their build outputs are made to be absent).
absent=$tmp/absent
mk_default install PREFIX="$prefix" DESTDIR= CS_DLL="$absent" JAVA_JAR="$absent" GO_MOD="$absent"
check_installed "$prefix"
! grep -Eq 'swig|mcs|javac|go build' "$tmp/make.log" || fail "install built a binding:"$'\n'"$(cat "$tmp/make.log")"
mk_default uninstall PREFIX="$prefix" DESTDIR=
[ ! -e "$prefix" ] || fail "make uninstall left:"$'\n'"$(find "$prefix")"

# --- make install PREFIX=... DESTDIR=... ------------------------------------------
# The prefix recorded in tpurt.pc is PREFIX; the files land under DESTDIR; no ldconfig
# even when PREFIX is a directory the loader searches.
stage=$tmp/stage
staged_prefix=/opt/tpurt-check-$$
FAKE_SYSTEM_LIBDIR=$staged_prefix/lib mk install PREFIX="$staged_prefix" DESTDIR="$stage"
[ ! -e "$staged_prefix" ] || fail "install with DESTDIR wrote to $staged_prefix"
check_installed "$stage$staged_prefix"
grep -qx "prefix=$staged_prefix" "$stage$staged_prefix/lib/pkgconfig/tpurt.pc" ||
  fail "staged tpurt.pc does not say prefix=$staged_prefix"
FAKE_SYSTEM_LIBDIR=$staged_prefix/lib mk uninstall PREFIX="$staged_prefix" DESTDIR="$stage"
[ "$(ldconfig_runs)" -eq 2 ] || fail "install or uninstall with DESTDIR ran ldconfig"
left=$(find "$stage" -mindepth 1)
[ -z "$left" ] || fail "make uninstall DESTDIR=... left:"$'\n'"$left"

echo "check_pkgconfig: install (tool, man page, docs), shared/rpath/static/all-static builds," \
     "ldconfig only for loader directories, uninstall of files and made directories, DESTDIR OK"
