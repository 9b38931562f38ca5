#!/usr/bin/env bash
# Each package as its user meets it (packaging/packaging.mk), in a scratch directory,
# nothing taken from the build tree but the packages:
# - deb: make deb builds libtpurt1, libtpurt-dev and tpurt (lintian clean); unpacked with
#   dpkg-deb -x, they hold what they should, depend on each other at this version, and
#   the README's C program builds through the unpacked tpurt.pc and runs on the
#   unpacked library; the unpacked CLI prints this version;
# - nupkg: nuget installs Tpurt from a folder feed; the README's C# program compiles
#   against it and runs with neither MONO_PATH nor LD_LIBRARY_PATH;
# - jar-pom: mvn -o install:install-file puts the jar and its POM in a scratch local
#   repository; a program compiled and run against that jar alone;
# - go-proxy: the README's Go program in an empty module gets tpurt.dev/go/tpurt from
#   GOPROXY=file://... (no replace line), cgo finding the library through the unpacked
#   tpurt.pc.
# Prints "packages: N passed, N failed" (one per package); fails if any fails.
# CHECK_PACKAGES="deb nupkg" runs some of them (go needs deb's unpacked tpurt.pc).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
BUILD=${BUILD:-build}
if [ -n "${SANITIZE:-}" ]; then
  echo "check_packages: the packages are built from the plain build (not under SANITIZE=$SANITIZE)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
VERSION=$(make --no-print-directory -s print-version)
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "check_packages: no version from the Makefile ('$VERSION')" >&2; exit 1; }
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
passed=0 failed=0

fail() { echo "check_packages: $*" >&2; return 1; }
mk() { make --no-print-directory -s BUILD="$BUILD" "$@" >"$tmp/make.log" 2>&1 ||
         { tail -40 "$tmp/make.log" >&2; fail "make $* failed"; }; }
# The first ```LANG block after the first heading that names LANG_HEADING as a word.
readme_block() {
  awk -v lang="$1" -v word="$2" '
    /^#+ / && !under { n = split($0, w, /[^A-Za-z#+]+/); for (i = 1; i <= n; i++) if (w[i] == word) under = 1; next }
    under && $0 == "```" lang { on = 1; next }
    on && /^```$/ { exit }
    on { print }' README.md
}

# What an example's printing line promises in its trailing // comment ("// 28 8").
promised() { grep -E "$2" "$1" | sed -n 's|.*// *||p' | head -n 1; }

# The scratch root the .debs are unpacked into: the C and Go programs use it.
sysroot=$tmp/debroot
pc_env=(PKG_CONFIG_SYSROOT_DIR="$sysroot" PKG_CONFIG_LIBDIR="$sysroot/usr/lib/$MA/pkgconfig"
        PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1)

check_deb() {
  mk deb || return 1
  local p f deb
  for p in libtpurt1 libtpurt-dev tpurt; do
    deb=$BUILD/deb/${p}_$VERSION-1_$ARCH.deb
    [ -f "$deb" ] || { fail "make deb did not build $deb"; return 1; }
    dpkg-deb -x "$deb" "$sysroot" || { fail "dpkg-deb -x $deb failed"; return 1; }
    dpkg-deb -c "$deb" >"$tmp/$p.contents"
  done
  local lib=$sysroot/usr/lib/$MA
  # libtpurt1: the library under its SONAME, with a symbols file naming every export.
  [ "$(readlink "$lib/libtpurt.so.1")" = "libtpurt.so.$VERSION" ] && [ -f "$lib/libtpurt.so.$VERSION" ] ||
    { fail "libtpurt1: no libtpurt.so.1 -> libtpurt.so.$VERSION"; return 1; }
  # Outputs are read whole before grep: grep -q stops early, and pipefail would count the writer's SIGPIPE.
  grep -q 'SONAME.*\[libtpurt\.so\.1\]' <<<"$(readelf -d "$lib/libtpurt.so.$VERSION")" || { fail "libtpurt1: SONAME is not libtpurt.so.1"; return 1; }
  dpkg-deb -e "$BUILD/deb/libtpurt1_$VERSION-1_$ARCH.deb" "$tmp/libtpurt1.control"
  local exports listed
  exports=$(nm -D --defined-only "$lib/libtpurt.so.$VERSION" | awk '$2 == "T" { print $3 }' | sort)
  listed=$(awk '/^ / { sub(/@.*/, "", $1); print $1 }' "$tmp/libtpurt1.control/symbols" 2>/dev/null | sort)
  [ -n "$exports" ] && [ "$exports" = "$listed" ] ||
    { fail "libtpurt1's symbols file and the library's exports differ:"$'\n'"$(diff <(echo "$listed") <(echo "$exports"))"; return 1; }
  # libtpurt-dev: every header, the .so link, the static library, the .pc files, ABI.md.
  for f in include/tpurt.h $(cd include && ls tpurt/*.h); do
    f=${f#include/}
    cmp -s "$root/include/$f" "$sysroot/usr/include/$f" || { fail "libtpurt-dev: usr/include/$f missing or not the tree's"; return 1; }
  done
  [ "$(readlink "$lib/libtpurt.so")" = libtpurt.so.1 ] || { fail "libtpurt-dev: libtpurt.so does not link to libtpurt.so.1"; return 1; }
  for f in "$lib/libtpurt.a" "$lib/pkgconfig/tpurt.pc" "$lib/pkgconfig/tpurt-static.pc"; do
    [ -f "$f" ] || { fail "libtpurt-dev: no ${f#"$sysroot"}"; return 1; }
  done
  compgen -G "$sysroot/usr/share/doc/libtpurt-dev/ABI.md*" >/dev/null || { fail "libtpurt-dev: no ABI.md"; return 1; }
  grep -q "^Version: $VERSION\$" "$lib/pkgconfig/tpurt.pc" || { fail "tpurt.pc is not at version $VERSION"; return 1; }
  # Each library file is in one package only.
  if grep -q 'libtpurt\.so' "$tmp/tpurt.contents" || grep -q 'include/' "$tmp/libtpurt1.contents"; then
    fail "a file sits in the wrong package"; return 1
  fi
  # tpurt: the CLI, without the build tree's rpath, and its man page.
  [ -x "$sysroot/usr/bin/tpurt" ] && [ -f "$sysroot/usr/share/man/man1/tpurt.1.gz" ] || { fail "tpurt: no usr/bin/tpurt or man page"; return 1; }
  ! grep -qE 'RPATH|RUNPATH' <<<"$(readelf -d "$sysroot/usr/bin/tpurt")" || { fail "tpurt: the CLI keeps an rpath"; return 1; }
  local out
  out=$(LD_LIBRARY_PATH=$lib "$sysroot/usr/bin/tpurt" --version) && [[ $out == "tpurt $VERSION (runtime $VERSION"* ]] ||
    { fail "the unpacked CLI printed '$out'"; return 1; }
  # Depends: -dev on libtpurt1 of exactly this version, the CLI on libtpurt1.
  local dev_dep cli_dep
  dev_dep=$(dpkg-deb -f "$BUILD/deb/libtpurt-dev_$VERSION-1_$ARCH.deb" Depends)
  cli_dep=$(dpkg-deb -f "$BUILD/deb/tpurt_$VERSION-1_$ARCH.deb" Depends)
  [[ ", $dev_dep," == *", libtpurt1 (= $VERSION-1),"* ]] || { fail "libtpurt-dev Depends: $dev_dep"; return 1; }
  [[ ", $cli_dep," == *", libtpurt1 (>= $VERSION)"* ]] || { fail "tpurt Depends: $cli_dep"; return 1; }
  # The README's C program through the unpacked tpurt.pc, run on the unpacked library.
  mkdir -p "$tmp/c"
  readme_block c C >"$tmp/c/hello.c"
  [ -s "$tmp/c/hello.c" ] || { fail "README.md has no \`\`\`c block under a heading naming C"; return 1; }
  local flags
  flags=$(env "${pc_env[@]}" pkg-config --cflags --libs tpurt) || { fail "pkg-config tpurt failed on the unpacked .pc"; return 1; }
  [[ $flags == *"-I$sysroot/usr/include"* && $flags == *"-L$lib"* ]] || { fail "pkg-config gave '$flags', not the unpacked paths"; return 1; }
  # shellcheck disable=SC2086 # pkg-config's flags are words
  gcc -o "$tmp/c/hello" "$tmp/c/hello.c" $flags || { fail "the README's C program does not build"; return 1; }
  grep -q "libtpurt.so.1 => $lib/" <<<"$(LD_LIBRARY_PATH=$lib ldd "$tmp/c/hello")" || { fail "hello does not load the unpacked libtpurt"; return 1; }
  out=$(LD_LIBRARY_PATH=$lib timeout 30 "$tmp/c/hello") || { fail "the README's C program failed: $out"; return 1; }
  # The values the snippet's printf line promises in its comment (/* 10 20 */), on every line.
  local want
  want=$(grep 'printf' "$tmp/c/hello.c" | sed -n 's|.*/\* *\([-0-9. ]*[0-9]\) *\*/.*|\1|p' | head -n 1)
  [ -n "$out" ] && { [ -z "$want" ] || ! grep -qv " $want\$" <<<"$out"; } ||
    { fail "the README's C program printed '$out', not '$want' on every line"; return 1; }
  echo "deb: 3 packages, lintian clean; contents, symbols and Depends checked; the README's C program printed $(wc -l <<<"$out") lines of '$want'"
}

check_nupkg() {
  command -v nuget >/dev/null && command -v mcs >/dev/null ||
    { fail "nupkg: nuget or mcs is missing (bash tools/install-deps.sh)"; return 1; }
  mk nupkg || return 1
  local feed=$tmp/feed app=$tmp/cs pkg
  mkdir -p "$feed" "$app/packages" "$app/bin"
  cp "$BUILD/nupkg/Tpurt.$VERSION.nupkg" "$feed/"
  (cd "$app" && HOME=$tmp timeout 60 nuget install Tpurt -Version "$VERSION" -Source "$feed" -OutputDirectory packages \
     -NonInteractive >"$tmp/nuget.log" 2>&1) || { cat "$tmp/nuget.log" >&2; fail "nuget install from the folder feed failed"; return 1; }
  pkg=$app/packages/Tpurt.$VERSION
  for f in lib/net45/Tpurt.dll lib/net45/Tpurt.dll.config runtimes/linux-x64/native/libtpurt_csharp.so \
           runtimes/linux-x64/native/libtpurt.so.1 build/Tpurt.targets README.md; do
    [ -f "$pkg/$f" ] || { fail "the installed package has no $f"; return 1; }
  done
  awk '/^```csharp$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$pkg/README.md" >"$app/Program.cs"
  [ -s "$app/Program.cs" ] || { fail "the package's README.md has no csharp block"; return 1; }
  (cd "$app" && mcs -nologo -r:"$pkg/lib/net45/Tpurt.dll" -out:bin/Program.exe Program.cs) ||
    { fail "the package's C# example does not compile against it"; return 1; }
  # What a project referencing the package gets in its output (copy-local, Tpurt.targets).
  cp "$pkg"/lib/net45/* "$pkg"/runtimes/linux-x64/native/* "$app/bin/"
  local out
  out=$(cd "$app/bin" && env -u MONO_PATH -u LD_LIBRARY_PATH timeout 60 mono Program.exe 2>&1) ||
    { fail "the C# example failed: $out"; return 1; }
  local want
  want=$(promised "$app/Program.cs" 'Console\.Write')
  [ -n "$want" ] && [ "$out" = "$want" ] || { fail "the C# example printed '$out', not '$want' (its comment)"; return 1; }
  echo "nupkg: Tpurt.$VERSION installed from a folder feed; the README's C# example printed '$out' without MONO_PATH or LD_LIBRARY_PATH"
}

check_jar() {
  mk jar-pom || return 1
  # Offline, the scratch repository holds only Debian's Maven plugins (linked from
  # /usr/share/maven-repo): the install plugin is named with the version Debian ships.
  local repo=$tmp/m2 jar plugin=/usr/share/maven-repo/org/apache/maven/plugins/maven-install-plugin v
  v=$(find "$plugin" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*' -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)
  command -v mvn >/dev/null && [ -n "$v" ] ||
    { fail "jar-pom: needs maven and libmaven-install-plugin-java (bash tools/install-deps.sh)"; return 1; }
  cp -rs /usr/share/maven-repo "$repo"
  (cd "$tmp" && timeout 120 mvn -o -B -q -Dmaven.repo.local="$repo" "org.apache.maven.plugins:maven-install-plugin:$v:install-file" \
     -Dfile="$root/$BUILD/maven/tpurt-$VERSION.jar" -DpomFile="$root/$BUILD/maven/tpurt-$VERSION.pom" \
     >"$tmp/mvn.log" 2>&1) || { cat "$tmp/mvn.log" >&2; fail "mvn -o install:install-file failed"; return 1; }
  jar=$repo/org/tpurt/tpurt/$VERSION/tpurt-$VERSION.jar
  [ -f "$jar" ] && [ -f "${jar%.jar}.pom" ] || { fail "the local repository has no org.tpurt:tpurt:$VERSION"; return 1; }
  # The binding's example (data-parallel linear regression, checked against the closed form).
  mkdir -p "$tmp/java"
  javac -nowarn -cp "$jar" -d "$tmp/java" examples/java/LinearRegression.java ||
    { fail "examples/java/LinearRegression.java does not compile against the jar"; return 1; }
  # No java.library.path, no LD_LIBRARY_PATH: the jar's own native libraries.
  local out
  out=$(cd "$tmp" && env -u LD_LIBRARY_PATH timeout 120 java -cp "$jar:$tmp/java" LinearRegression 2>&1) ||
    { fail "the Java example failed: $out"; return 1; }
  grep -q '^replicas agree: yes;.*: OK$' <<<"$out" || { fail "the Java example did not converge: $out"; return 1; }
  echo "jar-pom: org.tpurt:tpurt:$VERSION installed offline into a scratch repository; LinearRegression on the jar alone: $(tail -n 1 <<<"$out")"
}

check_go() {
  mk go-proxy || return 1
  [ -f "$sysroot/usr/lib/$MA/pkgconfig/tpurt.pc" ] || { fail "go: needs the unpacked libtpurt-dev (the deb check)"; return 1; }
  local mod=$tmp/gomod out
  mkdir -p "$mod"
  readme_block go Go >"$mod/main.go"
  [ -s "$mod/main.go" ] || { fail "README.md has no \`\`\`go block under a heading naming Go"; return 1; }
  printf '%s\n' 'module example.com/hello' '' 'go 1.19' >"$mod/go.mod"
  # The cache is kept between runs (the SWIG wrapper takes minutes to compile); the
  # module cache is the scratch directory's, so the module comes from the proxy.
  local go_env=(GOPROXY="file://$root/$BUILD/go-proxy" GOFLAGS=-mod=mod GONOSUMDB=tpurt.dev GOSUMDB=off
                GOTOOLCHAIN=local GO111MODULE=on GOPATH="$tmp/gopath" GOCACHE="$root/$BUILD/go-proxy-cache"
                "${pc_env[@]}")
  (cd "$mod" && env "${go_env[@]}" go get "tpurt.dev/go/tpurt@v$VERSION" >"$tmp/go.log" 2>&1 &&
     env "${go_env[@]}" timeout 600 go build -o hello . >>"$tmp/go.log" 2>&1) ||
    { cat "$tmp/go.log" >&2; fail "go: the README's program does not build from the proxy"; return 1; }
  ! grep -q replace "$mod/go.mod" && grep -q "tpurt.dev/go/tpurt v$VERSION" "$mod/go.mod" ||
    { fail "go.mod does not require tpurt.dev/go/tpurt v$VERSION plainly: $(cat "$mod/go.mod")"; return 1; }
  out=$(cd "$mod" && LD_LIBRARY_PATH=$sysroot/usr/lib/$MA timeout 60 ./hello 2>&1) || { fail "go: the program failed: $out"; return 1; }
  local want
  want=$(promised "$mod/main.go" 'fmt\.Print')
  [ -n "$want" ] && [ "$out" = "$want" ] || { fail "go: the program printed '$out', not '$want' (its comment)"; return 1; }
  echo "go-proxy: tpurt.dev/go/tpurt v$VERSION from GOPROXY=file:// with no replace line; the README's Go program printed '$out'"
}

for c in ${CHECK_PACKAGES:-deb nupkg jar go}; do
  if "check_$c"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "check_packages: $c FAILED" >&2; fi
done
echo "packages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
