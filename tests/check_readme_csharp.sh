#!/usr/bin/env bash
# The C# snippets of README.md and bindings/csharp/README.md, as a new user takes them:
# each ```csharp block saved as Program.cs, compiled and run from the build tree with
# the commands the READMEs give (mcs -r:.../Tpurt.dll; MONO_PATH=... mono Program.exe,
# no LD_LIBRARY_PATH), must print the sum its comment promises ("28 8").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${SANITIZE:-}" ]; then
  echo "check_readme_csharp: run in the plain build (not under SANITIZE=$SANITIZE)"
  exit 0
fi
BUILD=${BUILD:-build}
make --no-print-directory -s -C "$root" BUILD="$BUILD" bindings-csharp >/dev/null
cs_dir=$(cd "$root/$BUILD/bindings/csharp" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for readme in README.md bindings/csharp/README.md; do
  mkdir -p "$tmp/$readme"
  awk '/^```csharp$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$root/$readme" >"$tmp/$readme/Program.cs"
  [ -s "$tmp/$readme/Program.cs" ] || { echo "check_readme_csharp: no csharp block in $readme" >&2; exit 1; }
  (cd "$tmp/$readme" && mcs -nologo -r:"$cs_dir/Tpurt.dll" Program.cs) ||
    { echo "check_readme_csharp: the snippet of $readme does not compile" >&2; exit 1; }
  out=$(cd "$tmp/$readme" && env -u LD_LIBRARY_PATH MONO_PATH="$cs_dir" timeout 60 mono Program.exe 2>&1) ||
    { echo "$out" >&2; echo "check_readme_csharp: the snippet of $readme failed" >&2; exit 1; }
  [ "$out" = "28 8" ] || { echo "check_readme_csharp: the snippet of $readme printed '$out', not '28 8'" >&2; exit 1; }
done
echo "check_readme_csharp: both C# snippets compile and run from the build tree as the READMEs say"
