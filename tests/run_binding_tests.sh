#!/usr/bin/env bash
# Runs one language binding's tests through its make target (test-<lang>), which
# prints "<lang>: N passed, N failed". Under SANITIZE the managed runtimes would load
# an instrumented libtpurt without its runtime, so the bindings are tested in the
# plain build only.
#   bash tests/run_binding_tests.sh csharp|java|go|python
set -euo pipefail
lang=${1:?usage: run_binding_tests.sh LANG}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${SANITIZE:-}" ]; then
  echo "$lang: tested in the plain build (not under SANITIZE=$SANITIZE)"
  exit 0
fi
exec make --no-print-directory -C "$root" BUILD="${BUILD:-build}" "test-$lang"
