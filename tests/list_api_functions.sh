#!/usr/bin/env bash
# Prints the name of every function declared TPU_API in the public headers, one a
# line, sorted. The ABI tests take the list of functions from here, never by hand.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# perl is part of every Debian install (perl-base). Comments go first so that text in
# them cannot look like a declaration.
perl -0777 -ne 's{/\*.*?\*/}{ }gs; s{//[^\n]*}{ }g;
  print "$1\n" while /\bTPU_API\b[^;{}()]*?\b(tpu_\w+)\s*\(/g' \
  "$root"/include/tpurt.h "$root"/include/tpurt/*.h | sort -u
