#!/usr/bin/env bash
# plot_standing.sh - draws docs/standing.svg, the README's plot, with gnuplot: busbw at
# 16 MiB of tasks over shared memory and over TCP beside Open MPI and Gloo, for 2, 4 and
# 8 tasks, from the "busbw at 16 MiB" rows of docs/PERFORMANCE.md's table "Against Open
# MPI and Gloo", so that the plot and the table cannot disagree.
#
# usage: bench/plot_standing.sh [--check]
#   --check  writes nothing; draws into a temporary file and exits 1 when docs/standing.svg
#            is not that, byte for byte (tests/check_readme.sh runs it)
# gnuplot ($GNUPLOT, default gnuplot; Debian: gnuplot-nox) is required: exit 3 without it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
table=$root/docs/PERFORMANCE.md
out=$root/docs/standing.svg
check=0
case "${1:-}" in
  --check) check=1 ;;
  '') ;;
  *) sed -n '7,10p' "$0" >&2; exit 2 ;;
esac
GNUPLOT=${GNUPLOT:-gnuplot}
if ! command -v "$GNUPLOT" >/dev/null 2>&1; then
  echo "plot_standing.sh: gnuplot not found (Debian: apt-get install gnuplot-nox, or bash tools/install-deps.sh)" >&2
  exit 3
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One line per task count: n, then the bars' GB/s in the order of the plot command below
# ("?" where the table has no figure). A row with an empty "where" continues the section
# above it; the section's name drops its parenthesis.
awk -F'|' '
  function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
  /^## / { inside = ($0 == "## Against Open MPI and Gloo"); next }
  !inside || !/^\|/ { next }
  !head { for (i = 2; i < NF; i++) col[trim($i)] = i; head = 1; next }
  /^\|---/ { next }
  {
    where = trim($2); sub(/ *\(.*/, "", where)
    if (where != "") section = where
    if (trim($4) != "busbw at 16 MiB") next
    n = trim($3) + 0; ns[n] = 1
    for (name in col) {
      cell = trim($(col[name]))
      if (cell ~ /^[0-9.]+ GB\/s$/) { sub(/ GB\/s$/, "", cell); v[section, n, name] = cell }
    }
  }
  function fig(s, n, c) { return ((s, n, c) in v) ? v[s, n, c] : "?" }
  END {
    if (!head) { print "plot_standing.sh: no table under \"## Against Open MPI and Gloo\" in docs/PERFORMANCE.md" > "/dev/stderr"; exit 1 }
    for (n = 2; n <= 8; n *= 2)
      print n, fig("tasks over shared memory", n, "Open MPI"), fig("tasks over shared memory", n, "tpurt"),
        fig("tasks over TCP", n, "Open MPI"), fig("tasks over TCP", n, "Gloo (ring)"), fig("tasks over TCP", n, "tpurt")
  }' "$table" >"$tmp/standing.dat"
if grep -q '?' "$tmp/standing.dat"; then
  echo "plot_standing.sh: docs/PERFORMANCE.md's table lacks figures (n, then ? for each missing bar):" >&2
  grep '?' "$tmp/standing.dat" >&2
  exit 1
fi

target=$out
((check)) && target=$tmp/standing.svg
# A clustered histogram: 5 bars a group, gap 1, so bar j of group i is centred at
# i + (j - 2) / 6, where its label goes. The peers are pale, tpurt solid.
"$GNUPLOT" <<EOF
set terminal svg size 640,330 font "sans-serif,12" background rgb 'white'
set output '$target'
set datafile missing '?'
set title 'Float32 all-reduce of 16 MiB: busbw in GB/s, higher is better'
set style data histogram
set style histogram clustered gap 1
set style fill solid 1 noborder
set boxwidth 0.9 relative
set yrange [0:*]
set ytics 1
set grid ytics lc rgb '#dddddd'
set xtics scale 0
set xrange [-0.5:2.5]
set key below horizontal Left reverse maxcols 3 samplen 1 width 1
bar(j) = \$0 + (j - 2) / 6.0
plot '$tmp/standing.dat' \
       using 2:xtic(sprintf('%d tasks', \$1)) lc rgb '#1f77b4' fs transparent solid 0.45 border lc rgb '#1f77b4' title 'Open MPI, shared memory', \
    '' using 3 lc rgb '#2ca02c' title 'tpurt tasks, shared memory', \
    '' using 4 lc rgb '#ff7f0e' fs transparent solid 0.45 border lc rgb '#ff7f0e' title 'Open MPI, TCP', \
    '' using 5 lc rgb '#7f7f7f' fs transparent solid 0.45 border lc rgb '#7f7f7f' title 'Gloo ring, TCP', \
    '' using 6 lc rgb '#d62728' title 'tpurt tasks, TCP', \
    for [j = 0:4] '' using (bar(j)):(column(j + 2)):(sprintf('%.2f', column(j + 2))) \
       with labels offset 0,0.6 font ',9' notitle
EOF

if ((check)); then
  if ! cmp -s "$target" "$out"; then
    drew=$(grep -o "GNUPLOT [^<]*[0-9]" "$out" 2>/dev/null || echo "no gnuplot")
    echo "plot_standing.sh: docs/standing.svg is not what docs/PERFORMANCE.md's table draws" \
      "(drawn by $drew; this is $("$GNUPLOT" --version)); bench/plot_standing.sh redraws it" >&2
    exit 1
  fi
  exit 0
fi
echo "plot_standing.sh: wrote docs/standing.svg"
