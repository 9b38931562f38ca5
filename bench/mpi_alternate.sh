#!/usr/bin/env bash
# mpi_alternate.sh - the MPI plugin against a bare MPI_Allreduce, alternated: per
# round the anchor (../shared/anchors/mpi_allreduce.c), then `tpurt bench --tasks N
# --transport mpi` of each build named, one size at a time. One CSV line a round:
#   n,bytes,round,mpi=US,US_OF_BUILD_1,...,load=LOADAVG
# usage: bench/mpi_alternate.sh ROUNDS "NS" "SIZES" BUILD_DIR...
#   e.g. bench/mpi_alternate.sh 7 "2 4 8" "8 1048576" build-before build
# Each BUILD_DIR has bin/tpurt and lib/libtpurt_mpi.so; the anchor is built into
# $BUILD_DIR of the first build (anchor/mpi_allreduce) unless ANCHOR names one.
# TRANSPORT=shm (or tcp) alternates tpurt's tasks over that transport instead, against
# the same bare MPI_Allreduce (Open MPI picks shared memory on one host).
set -uo pipefail
(($# >= 4)) || { sed -n '2,9p' "$0"; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=$1 ns=$2 sizes=$3
shift 3
ANCHOR=${ANCHOR:-$1/anchor/mpi_allreduce}
if [[ ! -x $ANCHOR ]]; then
  mkdir -p "$(dirname "$ANCHOR")"
  mpicc -O3 -o "$ANCHOR" "${ANCHORS:-$ROOT/../shared/anchors}/mpi_allreduce.c" || exit 1
fi
for n in $ns; do
  for s in $sizes; do
    for ((r = 1; r <= rounds; r++)); do
      m=$(timeout 600 mpirun --oversubscribe --allow-run-as-root --mca oob_tcp_if_include lo -n "$n" \
        "$ANCHOR" -b "$s" -e "$s" -t 0.3 2>/dev/null | awk -F, '$1 ~ /^[0-9]+$/ { v = $4 } END { print v == "" ? "-" : v }')
      line="$n,$s,$r,mpi=$m"
      for b in "$@"; do
        p=$(TPURT_MPI_PLUGIN=$(cd "$b" && pwd)/lib/libtpurt_mpi.so "$b/bin/tpurt" bench --csv --tasks "$n" \
          --transport "${TRANSPORT:-mpi}" --timeout 600 -b "$s" -e "$s" 2>/dev/null |
          sed -n 's/^\[0\] //; /^[0-9]/p' | awk -F, '{ v = $5 } END { print v == "" ? "-" : v }')
        line+=",$p"
      done
      echo "$line,load=$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
