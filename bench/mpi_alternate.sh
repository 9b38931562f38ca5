#!/usr/bin/env bash
# mpi_alternate.sh - the MPI plugin against a bare MPI_Allreduce, alternated: per
# round the anchor (../shared/anchors/mpi_allreduce.c), then `tpurt bench --tasks N
# --transport mpi` of each build named, one size at a time. One CSV line a round, and
# after a size's rounds their medians with each build's ratio to the bare call (time /
# bare: below 1 is faster):
#   n,bytes,round,mpi=US,US_OF_BUILD_1,...,load=LOADAVG
#   n,bytes,median,mpi=US,US_OF_BUILD_1,...,ratio=RATIO_1,...
# usage: bench/mpi_alternate.sh ROUNDS "NS" "SIZES" BUILD_DIR...
#   e.g. bench/mpi_alternate.sh 7 "2 4 8" "8 1048576" build-before build
# Each BUILD_DIR has bin/tpurt and lib/libtpurt_mpi.so; the anchor is built into
# $BUILD_DIR of the first build (anchor/mpi_allreduce) unless ANCHOR names one.
# TRANSPORT=shm (or tcp) alternates tpurt's tasks over that transport instead, against
# the same bare MPI_Allreduce (Open MPI picks shared memory on one host).
set -uo pipefail
(($# >= 4)) || { sed -n '2,14p' "$0"; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=$1 ns=$2 sizes=$3
shift 3
ANCHOR=${ANCHOR:-$1/anchor/mpi_allreduce}
if [[ ! -x $ANCHOR ]]; then
  mkdir -p "$(dirname "$ANCHOR")"
  mpicc -O3 -o "$ANCHOR" "${ANCHORS:-$ROOT/../shared/anchors}/mpi_allreduce.c" || exit 1
fi
# The median of the numbers given ("-" for a failed run are left out; "-" if none).
median() {
  printf '%s\n' "$@" | grep -v '^-$' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
for n in $ns; do
  for s in $sizes; do
    declare -a got=()  # got[b]: build b's times of this size (b = 0: the bare call)
    for ((r = 1; r <= rounds; r++)); do
      m=$(timeout 600 mpirun --oversubscribe --allow-run-as-root --mca oob_tcp_if_include lo -n "$n" \
        "$ANCHOR" -b "$s" -e "$s" -t 0.3 2>/dev/null | awk -F, '$1 ~ /^[0-9]+$/ { v = $4 } END { print v == "" ? "-" : v }')
      line="$n,$s,$r,mpi=$m"
      got[0]+=" $m"
      k=0
      for b in "$@"; do
        p=$(TPURT_MPI_PLUGIN=$(cd "$b" && pwd)/lib/libtpurt_mpi.so "$b/bin/tpurt" bench --csv --tasks "$n" \
          --transport "${TRANSPORT:-mpi}" --timeout 600 -b "$s" -e "$s" 2>/dev/null |
          sed -n 's/^\[0\] //; /^[0-9]/p' | awk -F, '{ v = $5 } END { print v == "" ? "-" : v }')
        line+=",$p"
        got[++k]+=" $p"
      done
      echo "$line,load=$(cut -d' ' -f1 /proc/loadavg)"
    done
    # shellcheck disable=SC2086  # the times are words
    bare=$(median ${got[0]})
    line="$n,$s,median,mpi=$bare" ratios=""
    # shellcheck disable=SC2086
    for ((k = 1; k <= $#; k++)); do
      med=$(median ${got[k]})
      line+=",$med"
      ratios+=",$(awk -v t="$med" -v m="$bare" 'BEGIN { if (t == "-" || m == "-" || m == 0) print "-"; else printf "%.2fx", t / m }')"
    done
    echo "$line,ratio=${ratios#,}"
    unset got
  done
done
