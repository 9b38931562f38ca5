#!/usr/bin/env bash
# make install INSTALL_BINDINGS=yes puts each binding where its ecosystem looks (the C# assembly and its
# glue, the Java jar and JNI library, the Go module source), a program uses the
# installed Java binding, and make uninstall removes all of it with the directories
# install made.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
if [ -n "${SANITIZE:-}" ]; then
  echo "check_bindings_install: the bindings install from the plain build (not under SANITIZE=$SANITIZE)"
  exit 0
fi
fail() { echo "check_bindings_install: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
mk() { make --no-print-directory -s BUILD="$BUILD" LDCONFIG=true PREFIX="$prefix" "$@" >"$tmp/make.log" 2>&1 ||
         { cat "$tmp/make.log" >&2; fail "make $* failed"; }; }

# INSTALL_BINDINGS=yes builds all three and installs them.
mk install INSTALL_BINDINGS=yes
for f in lib/cli/tpurt/Tpurt.dll lib/cli/tpurt/Tpurt.dll.config lib/libtpurt_csharp.so \
         share/java/tpurt.jar lib/jni/libtpurt_java.so \
         share/gocode/src/tpurt.dev/go/tpurt/go.mod share/gocode/src/tpurt.dev/go/tpurt/tpurt_wrap.cxx \
         share/gocode/src/tpurt.dev/go/tpurt/tpurt_binding.hpp share/gocode/src/tpurt.dev/go/tpurt/support/system.hpp; do
  [ -e "$prefix/$f" ] || fail "make install did not create $prefix/$f"
done

# A Java program against the installed jar and JNI library, nothing from the build tree.
mkdir -p "$tmp/java"
cat >"$tmp/java/Smoke.java" <<'JAVA'
import java.util.*;
import org.tpurt.*;
public class Smoke {
  public static void main(String[] a) {
    SystemOptions o = new SystemOptions();
    o.setNumCores(4);
    try (TpuSystem s = tpu.initialize_system(o)) {
      List<List<Tensor>> in = new ArrayList<>();
      for (int r = 0; r < 4; r++) in.add(List.of(Tensor.fromFloat32(new long[] {1}, new float[] {r})));
      float[] sum = tpu.replicate((ctx, x) -> new Tensor[] {tpu.cross_replica_sum(x[0])}, in).get(3)[0].toFloat32Vector();
      System.out.println("sum " + sum[0]);
    }
  }
}
JAVA
javac -nowarn -cp "$prefix/share/java/tpurt.jar" -d "$tmp/java" "$tmp/java/Smoke.java"
out=$(java -Djava.library.path="$prefix/lib/jni" -cp "$prefix/share/java/tpurt.jar:$tmp/java" Smoke 2>&1) ||
  fail "the installed Java binding failed: $out"
[ "$out" = "sum 6.0" ] || fail "the installed Java binding printed '$out', not 'sum 6.0'"

mk uninstall
[ ! -e "$prefix" ] || fail "make uninstall left:"$'\n'"$(find "$prefix")"

# The default (auto) installs the bindings that were built: all three, just above.
mk install
for f in lib/cli/tpurt/Tpurt.dll share/java/tpurt.jar share/gocode/src/tpurt.dev/go/tpurt/go.mod; do
  [ -e "$prefix/$f" ] || fail "make install (auto) did not install the built binding's $prefix/$f"
done
mk uninstall
[ ! -e "$prefix" ] || fail "make uninstall left:"$'\n'"$(find "$prefix")"
echo "check_bindings_install: C# assembly and glue, Java jar and JNI library, Go module source; installed Java runs; uninstall leaves nothing"
