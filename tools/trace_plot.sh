#!/usr/bin/env bash
# trace_plot.sh TRACE.json OUT.png [TITLE]: a timeline of a (merged) tpurt trace drawn
# with gnuplot, for when no trace viewer runs (Perfetto and chrome://tracing need a
# browser): one row per task and participant, computations grey, collectives split
# into waiting (orange) then moving (blue), feeds green, embedding phases purple.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: tools/trace_plot.sh TRACE.json OUT.png [TITLE]" >&2; exit 2; }
trace=$1 out=$2 title=${3:-$1}
data=$(mktemp) labels=$(mktemp)
trap 'rm -f "$data" "$labels"' EXIT
# Rows: (pid, tid) in order, the steps' row (tid 0) first in each task.
jq -r '
  (if type == "object" then .traceEvents else . end) as $e |
  ([$e[] | select(.ph == "X") | .ts] | min) as $t0 |
  ([$e[] | select(.ph == "X") | [.pid, .tid]] | unique) as $rows |
  ($e | map(select(.ph == "M" and .name == "thread_name")) |
    map({key: "\(.pid)/\(.tid)", value: .args.name}) | from_entries) as $names |
  ($rows | to_entries[] | "L \(.key) task \(.value[0]) \($names["\(.value[0])/\(.value[1])"] // "")"),
  ($e[] | select(.ph == "X") | . as $x |
    ($rows | index([[$x.pid, $x.tid]])) as $y |
    (($x.ts - $t0) / 1000) as $a | ($x.dur / 1000) as $d |
    if $x.cat == "collective" then
      (($x.args.wait_us // 0) / 1000) as $w |
      "\($a) \($a + $w) \($y) 3", "\($a + $w) \($a + $d) \($y) 4"
    elif $x.cat == "compute" then "\($a) \($a + $d) \($y) 1"
    elif $x.cat == "step" then "\($a) \($a + $d) \($y) 2"
    elif $x.cat == "feed" then "\($a) \($a + $d) \($y) 5"
    else "\($a) \($a + $d) \($y) 6" end)' "$trace" >"$data.all"
grep '^L ' "$data.all" | cut -d' ' -f2- >"$labels"
grep -v '^L ' "$data.all" >"$data"
rm -f "$data.all"
rows=$(wc -l <"$labels")
ytics=$(awk '{n = $1; $1 = ""; sub(/^ /, ""); printf "%s\"%s\" %d", (NR > 1 ? ", " : ""), $0, n}' "$labels")
gnuplot <<GP
set terminal pngcairo size 1400,$((120 + rows * 60)) font "sans,11"
set output "$out"
set title "$title" noenhanced
set xlabel "ms since the first event"
set ytics ($ytics)
set ytics noenhanced
set yrange [$rows - 0.3:-0.7]
set style fill solid 0.9 noborder
set key outside bottom center horizontal
set grid xtics
plot "$data" using (\$4 == 2 ? (\$1 + \$2) / 2 : 1/0):3:((\$2 - \$1) / 2):(0.15) with boxxyerror lc rgb "#606060" title "step", \
     "$data" using (\$4 == 1 ? (\$1 + \$2) / 2 : 1/0):3:((\$2 - \$1) / 2):(0.4) with boxxyerror lc rgb "#c8c8c8" title "computation", \
     "$data" using (\$4 == 3 ? (\$1 + \$2) / 2 : 1/0):3:((\$2 - \$1) / 2):(0.3) with boxxyerror lc rgb "#f08c28" title "collective: waiting", \
     "$data" using (\$4 == 4 ? (\$1 + \$2) / 2 : 1/0):3:((\$2 - \$1) / 2):(0.3) with boxxyerror lc rgb "#2864c8" title "collective: moving", \
     "$data" using (\$4 == 5 ? (\$1 + \$2) / 2 : 1/0):3:((\$2 - \$1) / 2):(0.3) with boxxyerror lc rgb "#30a040" title "feed wait", \
     "$data" using (\$4 == 6 ? (\$1 + \$2) / 2 : 1/0):3:((\$2 - \$1) / 2):(0.3) with boxxyerror lc rgb "#9040a0" title "embedding"
GP
echo "$out: $rows rows"
