#!/usr/bin/env bash
# The test runner: every case in its own process, killed after its own time limit.
#   bash tests/run_tests.sh [--list] TEST...   (`make test` and `make test-list` pass them)
# A TEST is a cmocka binary or a *.sh check script. A binary's cases are the names
# `BINARY --list` prints (RUN_TESTS in tests/test_util.h) and each runs as
# `BINARY CASE`; a script is one case, named after its file, run with bash. The limits
# are in tests/test-list ($TPURT_TEST_LIST), times $TPURT_TEST_TIMEOUT_MULTIPLIER.
# T=PATTERN[,PATTERN...] keeps the cases whose name, or whose binary's or script's
# name, matches a pattern: a glob, or a plain word matched exactly, else as a prefix.
# Prints a line per case and the output of each that fails or runs out of time (every
# case's output is kept in $BUILD/test-logs/); the last line sums the cases, a script
# printing "<lang>: N passed, N failed" lines (the bindings' suites) counting as those.
set -uo pipefail
BUILD=${BUILD:-build}
SANITIZE=${SANITIZE:-}
LIST=${TPURT_TEST_LIST:-$(dirname "$0")/test-list}
T=${T:-}
KILL_AFTER=5 # seconds between SIGTERM and SIGKILL for a case out of time
TAIL=300     # lines of a failed case's output shown

die() { echo "run_tests: $*" >&2; exit 2; }

list_only=0
if [ "${1:-}" = --list ]; then list_only=1; shift; fi
[ $# -gt 0 ] || die "usage: tests/run_tests.sh [--list] TEST... (make test passes them)"

mult=${TPURT_TEST_TIMEOUT_MULTIPLIER:-1}
awk -v m="$mult" 'BEGIN { exit !(m ~ /^[0-9]*\.?[0-9]+$/ && m > 0 && m <= 1000) }' ||
  die "TPURT_TEST_TIMEOUT_MULTIPLIER=\"$mult\": expected a number in (0, 1000]"

# --- tests/test-list: PATTERN SECONDS [whole], the last matching line wins -----------
pats=() secs=() modes=()
sanitized=1
n=0
[ -r "$LIST" ] || die "cannot read $LIST"
while IFS= read -r line || [ -n "$line" ]; do
  n=$((n + 1))
  line=${line%%#*}
  read -r pat sec mode extra <<<"$line"
  [ -n "${pat:-}" ] || continue
  [[ "${sec:-}" =~ ^[1-9][0-9]*$ ]] || die "$LIST:$n: expected PATTERN SECONDS [whole], got '$line'"
  if [ "$pat" = sanitized ]; then sanitized=$sec; continue; fi
  [ -z "${mode:-}" ] || [ "$mode" = whole ] || die "$LIST:$n: '$mode' is not 'whole'"
  [ -z "${extra:-}" ] || die "$LIST:$n: unexpected '$extra'"
  pats+=("$pat") secs+=("$sec") modes+=("${mode:-}")
done <"$LIST"
factor=$(awk -v m="$mult" -v s="$([ -n "$SANITIZE" ] && echo "$sanitized" || echo 1)" \
  'BEGIN { print m * s }')

# The line of tests/test-list for a case of a unit (binary or script): its index, or -1.
rule_for() {
  local name=$1 unit=$2 i r=-1
  for i in "${!pats[@]}"; do
    # shellcheck disable=SC2053 # the pattern is a glob
    if [[ $name == ${pats[i]} || $unit == ${pats[i]} || ${unit%.sh} == ${pats[i]} ]]; then r=$i; fi
  done
  echo "$r"
}

# --- the cases ----------------------------------------------------------------------
names=() units=() paths=() kinds=() limits=() # kind: case, whole (a binary) or script
failed=0
failures=()
add_case() { # name unit path kind
  local r lim
  r=$(rule_for "$1" "$2")
  [ "$r" -ge 0 ] || die "no line of $LIST matches $1 (add a '*' line)"
  lim=$(awk -v s="${secs[r]}" -v f="$factor" 'BEGIN { print s * f }')
  names+=("$1") units+=("$2") paths+=("$3") kinds+=("$4") limits+=("$lim")
}
for t in "$@"; do
  unit=$(basename "$t")
  case $t in
    *.sh) add_case "${unit%.sh}" "$unit" "$t" script; continue ;;
  esac
  if [ ! -x "$t" ]; then
    echo "run_tests: $t was not built" >&2
    failed=$((failed + 1)) failures+=("$unit (not built)")
    continue
  fi
  r=$(rule_for "$unit" "$unit")
  if [ "$r" -ge 0 ] && [ "${modes[r]}" = whole ]; then add_case "$unit" "$unit" "$t" whole; continue; fi
  if ! listed=$(timeout -k "$KILL_AFTER" 60 "$t" --list 2>&1) ||
     [ -z "$listed" ] || grep -qvE '^[A-Za-z0-9_.:/+=-]+$' <<<"$listed"; then
    echo "run_tests: '$t --list' did not print its case names (its main must use RUN_TESTS):" >&2
    head -n 20 <<<"$listed" >&2
    failed=$((failed + 1)) failures+=("$unit (no --list)")
    continue
  fi
  while IFS= read -r c; do add_case "$c" "$unit" "$t" case; done <<<"$listed"
done

# --- T: the selected cases ------------------------------------------------------------
selected=()
for i in "${!names[@]}"; do selected[i]=$([ -z "$T" ] && echo 1 || echo 0); done
if [ -n "$T" ]; then
  IFS=', ' read -ra wanted <<<"$T"
  for p in "${wanted[@]}"; do
    hit=0
    for pass in exact prefix; do
      for i in "${!names[@]}"; do
        u=${units[i]}
        if [[ $p == *[*?[]* ]]; then
          # shellcheck disable=SC2053
          [[ ${names[i]} == $p || $u == $p || ${u%.sh} == $p ]] || continue
        elif [ $pass = exact ]; then
          [[ ${names[i]} == "$p" || $u == "$p" || ${u%.sh} == "$p" ]] || continue
        else
          [[ ${names[i]} == "$p"* || $u == "$p"* ]] || continue
        fi
        selected[i]=1 hit=1
      done
      [ $hit -eq 1 ] && break
    done
    [ $hit -eq 1 ] || die "T=$T: no case matches '$p' (make test-list shows them)"
  done
fi

if [ $list_only -eq 1 ]; then
  for i in "${!names[@]}"; do
    [ "${selected[i]}" -eq 1 ] || continue
    printf '%-72s %6ss%s\n' "${names[i]}" "${limits[i]}" "$([ "${kinds[i]}" = whole ] && echo ' (whole binary)')"
  done
  for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
  [ "$failed" -eq 0 ]
  exit
fi

# --- running ----------------------------------------------------------------------------
logs=$BUILD/test-logs
rm -rf "$logs" && mkdir -p "$logs" || die "cannot make $logs"
passed=0
times=() skipped=()
unset CMOCKA_MESSAGE_OUTPUT # the runner reads cmocka's standard output
current=
# Interrupted (^C, or a limit of its own): the running case goes too.
trap 'if [ -n "$current" ]; then kill -KILL -- "-$current" 2>/dev/null; fi
      echo "run_tests: interrupted" >&2; exit 130' INT TERM

show_output() { # name log
  local lines
  lines=$(wc -l <"$2")
  echo "--- output of $1${3:+ ($3)}"
  if [ "$lines" -gt $TAIL ]; then echo "[... the first $((lines - TAIL)) lines are in $2]"; fi
  tail -n $TAIL "$2"
  echo "--- end of $1"
}

for i in "${!names[@]}"; do
  [ "${selected[i]}" -eq 1 ] || continue
  name=${names[i]} path=${paths[i]} lim=${limits[i]}
  log=$logs/${units[i]%.sh}.log
  [ "${kinds[i]}" = case ] && log=$logs/${units[i]}.${name//\//_}.log
  start=$(date +%s%N)
  # timeout makes a process group of its own: at the limit it signals all of it, and
  # after the case whatever the case left behind in it is killed.
  case ${kinds[i]} in
    case) cmd=("$path" "$name") ;;
    whole) cmd=("$path") ;;
    script) cmd=(bash "$path") ;;
  esac
  BUILD="$BUILD" SANITIZE="$SANITIZE" timeout -k $KILL_AFTER "$lim" "${cmd[@]}" >"$log" 2>&1 </dev/null &
  current=$! # timeout's process id, and its group's
  wait $current 2>/dev/null # no "Killed" from bash: the case's line says it
  rc=$?
  kill -KILL -- "-$current" 2>/dev/null
  current=
  secs_taken=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
  times+=("$secs_taken $name")
  p=0 f=0 why=
  case ${kinds[i]} in
    case)
      # Exit 0 and cmocka's OK line: a case that exits early did not pass. A skipped
      # case (cmocka's skip()) counts as neither, as cmocka counts it.
      if [ $rc -eq 0 ] && grep -qxF "[       OK ] $name" "$log"; then
        p=1
      elif [ $rc -eq 0 ] && grep -qxF "[  SKIPPED ] $name" "$log"; then
        skipped+=("$name")
        printf 'skip  %-64s %8ss\n' "$name" "$secs_taken"
        continue
      else
        f=1
      fi ;;
    whole)
      p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
      f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
      if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ $rc -eq 0 ]; then p=1; fi ;;
    script)
      p=$(sed -n 's/^[A-Za-z#]*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
      f=$(sed -n 's/^[A-Za-z#]*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log" | awk '{s+=$1} END {print s+0}')
      if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ $rc -eq 0 ]; then p=1; fi ;;
  esac
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    why="out of time: killed after ${lim} s"
  elif [ $rc -ne 0 ]; then
    why="exit $rc"
  elif [ "${kinds[i]}" = case ] && [ "$p" -eq 0 ]; then
    why="exit 0 before cmocka's OK line"
  elif [ "$f" -ne 0 ]; then
    why="$f failed"
  fi
  if [ -n "$why" ] && [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed + p)) failed=$((failed + f))
  if [ -z "$why" ]; then
    printf 'ok    %-64s %8ss\n' "$name" "$secs_taken"
  else
    printf 'FAIL  %-64s %8ss  (%s)\n' "$name" "$secs_taken" "$why"
    show_output "$name" "$log" "${units[i]}"
    failures+=("$name ($why)")
  fi
done

echo
echo "slowest: $(printf '%s\n' "${times[@]+"${times[@]}"}" | sort -rn | head -n 5 |
  awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1}')"
[ ${#skipped[@]} -eq 0 ] || echo "skipped: ${skipped[*]}"
for f in "${failures[@]+"${failures[@]}"}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
