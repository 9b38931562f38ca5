#!/usr/bin/env bash
# plot_busbw.sh - busbw against message size for every contender of a compare.sh run,
# one PNG per process count: DIR/busbw_nN.png, drawn with gnuplot.
#
# usage: bench/plot_busbw.sh DIR [N...]
#   DIR   a compare.sh output directory (its median CSVs: mpi_sm_nN.csv, mpi_tcp_nN.csv,
#         gloo_ring_nN.csv, tpurt_{tcp,shm,mpi}_nN.csv, tpurt_nN.csv)
#   N     process counts to draw (default: 2 4 8); a count with no data is skipped
# Prints the PNGs written. Without gnuplot ($GNUPLOT, default gnuplot) it says how to
# install it and exits 3, so that a caller can go on without the plots.
set -euo pipefail

[[ $# -ge 1 && -d $1 ]] || { sed -n '2,10p' "$0"; exit 2; }
DIR=$1
shift
NS=("$@")
((${#NS[@]})) || NS=(2 4 8)
GNUPLOT=${GNUPLOT:-gnuplot}
if ! command -v "$GNUPLOT" >/dev/null 2>&1; then
  echo "plot_busbw.sh: gnuplot not found, no plots (Debian: apt-get install gnuplot-nox)" >&2
  exit 3
fi
TERM_PNG=pngcairo
"$GNUPLOT" -e 'set terminal pngcairo' 2>/dev/null || TERM_PNG=png

# Contenders: file stem, time_us column, title, line style (dashed: the peers).
CONTENDERS=(
  mpi_sm     4 "Open MPI, shared memory"      "dt 2 lc rgb '#1f77b4' pt 4"
  mpi_tcp    4 "Open MPI, TCP"                "dt 2 lc rgb '#ff7f0e' pt 6"
  gloo_ring  4 "Gloo ring, TCP"               "dt 2 lc rgb '#7f7f7f' pt 8"
  tpurt_tcp  5 "tpurt tasks, tcp"             "dt 1 lc rgb '#d62728' pt 7"
  tpurt_shm  5 "tpurt tasks, shm"             "dt 1 lc rgb '#2ca02c' pt 5"
  tpurt_mpi  5 "tpurt tasks, mpi"             "dt 1 lc rgb '#9467bd' pt 9"
  tpurt      5 "tpurt, threads of 1 process"  "dt 3 lc rgb '#8c564b' pt 13"
)

data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
for n in "${NS[@]}"; do
  plots=()
  mkdir "$data/$n"
  for ((i = 0; i < ${#CONTENDERS[@]}; i += 4)); do
    stem=${CONTENDERS[i]} col=${CONTENDERS[i + 1]}
    csv=$DIR/${stem}_n$n.csv
    [[ -f $csv ]] || continue
    # size and busbw of the data rows (comments and the header have no number first);
    # busbw from the time, as the CSVs define it, since their busbw column has 4 decimals
    awk -F, -v c="$col" -v n="$n" '$1 ~ /^[0-9]+$/ && $c ~ /^[0-9.eE+-]+$/ && $c > 0 {
      print $1, $1 / ($c * 1e3) * 2 * (n - 1) / n }' \
      "$csv" >"$data/$n/$stem.dat"
    [[ -s $data/$n/$stem.dat ]] || continue
    plots+=("'$data/$n/$stem.dat' using 1:2 with linespoints lw 2 ${CONTENDERS[i + 3]} title '${CONTENDERS[i + 2]}'")
  done
  ((${#plots[@]})) || continue
  png=$DIR/busbw_n$n.png
  # x: the sizes measured, with a margin so that the end points stay clear of the axes
  xrange=$(cat "$data/$n"/*.dat | awk 'NR == 1 || $1 < lo { lo = $1 } NR == 1 || $1 > hi { hi = $1 }
    END { printf "%g:%g", lo / 1.6, hi * 1.6 }')
  joined=$(printf '%s, ' "${plots[@]}")
  "$GNUPLOT" <<EOF
set terminal $TERM_PNG size 1000,640 font ",11"
set output '$png'
set title "float32 sum all-reduce, n = $n (ranks, tasks or replicas) on one host of $(nproc) CPUs"
set xlabel 'message size per rank'
set ylabel 'busbw (GB/s) = size/time * 2(n-1)/n'
set logscale xy
set xrange [$xrange]
set xtics ("8 B" 8, "64 B" 64, "512 B" 512, "4 KiB" 4096, "32 KiB" 32768, \
           "256 KiB" 262144, "2 MiB" 2097152, "16 MiB" 16777216, "128 MiB" 134217728)
set format y '%g'
set grid xtics ytics mytics lc rgb '#dddddd'
set key bottom right box opaque
plot ${joined%, }
EOF
  echo "$png"
done
