#!/usr/bin/env bash
# One verdict on every task (issue 27, section 2): for each kind of failure one
# participant causes (another group mode, other groups, a bad argument only it finds, a
# skipped collective, a failing computation, a late core), every participant on every
# task must report the status one process reports, naming the same culprit (replica 1
# core 1). tests/cluster/verdict_worker.c runs 2 replicas x 2 cores; the matrix: one
# process of 4 cores (the reference), 2 tasks of 2 cores with each cross-replica group
# on one task ("local") or spanning both ("span"), and 4 tasks of 1 core; and with one
# group of all 4 participants ("all": the tasks' vote rides on their data exchange), 2
# and 4 tasks; over each data plane (TRANSPORTS, default "tcp shm mpi"; "mpi" under
# mpirun through the plugin, see below). Prints the matrix at the end: each cell
# holds the status of participants 0..3 (a culprit that did not call the collective
# shows what it returned, in lower case), "=" where every line matches one process's.
# Every run is bounded by `timeout`; deadlines are short (VERDICT_TIMEOUT_MS, 2000).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${BUILD:-build}
tpurt=$BUILD/bin/tpurt
worker=$BUILD/tests/verdict_worker
[ -x "$tpurt" ] && [ -x "$worker" ] || { echo "check_verdict: build $tpurt and $worker first" >&2; exit 1; }
source "$root/tests/cluster/report.sh"
export TPURT_HEARTBEAT_INTERVAL_MS=200 TPURT_HEARTBEAT_TIMEOUT_MS=3000
export TPURT_INIT_TIMEOUT_MS=30000 TPURT_SHUTDOWN_BARRIER_TIMEOUT_MS=5000
export VERDICT_TIMEOUT_MS=${VERDICT_TIMEOUT_MS:-2000}
unset TF_CONFIG SLURM_JOB_ID OMPI_COMM_WORLD_SIZE DTENSOR_JOBS TPURT_CLUSTER_TOKEN TPURT_TRANSPORT
# MPI through the plugin (as check_mpi.sh), where the tasks vote on tags of their own
# (lib/mpi_plugin/vote.cc): by default when mpirun and the plugin are here and
# SANITIZE is unset (Open MPI's own leaks and races would be reported as tpurt's);
# VERDICT_MPI=0 leaves it out.
plugin=$BUILD/lib/libtpurt_mpi.so
if [ -z "${TRANSPORTS:-}" ]; then
  TRANSPORTS="tcp shm"
  if [ "${VERDICT_MPI:-1}" != 0 ] && [ -z "${SANITIZE:-}" ] && command -v mpirun >/dev/null 2>&1 && [ -e "$plugin" ]; then
    TRANSPORTS+=" mpi"
  elif [ "${VERDICT_MPI:-1}" != 0 ]; then
    echo "check_verdict: no mpi runs (SANITIZE set, or mpirun, or $plugin from make mpi, missing)"
  fi
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
# launch N ARGS...: the worker on N tasks of 4/N cores (tpurt launch, or mpirun for mpi).
launch() {
  local n=$1 base addresses= i
  shift
  if [ "$TPURT_TRANSPORT" != mpi ]; then
    timeout 60 "$tpurt" launch -n "$n" --cores-per-task $((4 / n)) -- "$worker" "$@" 2>&1
    return
  fi
  base=$(port_base "$n") || { echo "no free ports"; return; }
  for ((i = 0; i < n; i++)); do addresses+=${addresses:+,}127.0.0.1:$((base + i)); done
  TPURT_MPI_PLUGIN=$root/$plugin TPURT_NUM_CORES=$((4 / n)) TPURT_TASK_ADDRESSES=$addresses \
    TPURT_COORDINATOR_ADDRESS=127.0.0.1:$base timeout -k 5 60 "${MPIRUN[@]}" -n "$n" "$worker" "$@" 2>&1
}
KINDS=${KINDS:-mode groups badarg skip fail late}

# lines OUTPUT: every participant's verdict line, sorted (one per participant).
lines() { grep -o 'verdict P[0-3] [a-z]* [A-Z_]* culprit=[a-z]*' <<<"$1" | sort; }
# cell LINES: "S0 S1 S2 S3", each participant's status (lower case: returned, not a
# collective's), "-" for a participant that printed nothing.
cell() {
  local p s out=
  for p in 0 1 2 3; do
    s=$(awk -v p="P$p" '$2 == p { print ($3 == "returned" ? tolower($4) : $4) }' <<<"$1" | head -n 1)
    s=$(sed -e 's/INVALID_ARGUMENT/INV/I' -e 's/DEADLINE_EXCEEDED/DL/I' -e 's/FAILED_PRECONDITION/FP/I' \
          -e 's/ABORTED/ABRT/I' -e 's/UNAVAILABLE/UNAV/I' <<<"$s")
    out+="${out:+ }${s:--}"
  done
  echo "$out"
}

declare -A ref table
setups=("1 process" "1 process, 1 group")
for kind in $KINDS; do
  for layout in local all; do
    out=$(env TPURT_NUM_CORES=4 timeout 60 "$worker" "$kind" $layout 2>&1)
    ref[$kind$layout]=$(lines "$out")
    s="1 process"
    [ $layout = all ] && s="1 process, 1 group"
    table["$kind|$s"]=$(cell "${ref[$kind$layout]}")
    if [ "$(wc -l <<<"${ref[$kind$layout]}")" = 4 ]; then
      ok "$kind: $s: $(cell "${ref[$kind$layout]}")"
    else bad "$kind: $s: not every participant reported" "$out"; fi
  done
done

for TPURT_TRANSPORT in $TRANSPORTS; do
  export TPURT_TRANSPORT
  for setup in "2 local" "2 span" "4 span" "2 all" "4 all"; do
    set -- $setup
    n=$1 layout=$2
    [ "$n" = 4 ] && name="4 tasks $TPURT_TRANSPORT"
    [ "$n" = 2 ] && name="2 tasks $layout $TPURT_TRANSPORT"
    [ "$layout" = all ] && name="$n tasks 1 group $TPURT_TRANSPORT"
    reflayout=local
    [ "$layout" = all ] && reflayout=all
    setups+=("$name")
    for kind in $KINDS; do
      start=$(date +%s%N)
      out=$(launch "$n" "$kind" "$layout")
      ms=$((($(date +%s%N) - start) / 1000000))
      got=$(lines "$out")
      c=$(cell "$got")
      if [ "$got" = "${ref[$kind$reflayout]}" ]; then
        table["$kind|$name"]="= $c"
        ok "$kind: $name: every participant as one process ($c; ${ms} ms)"
      else
        table["$kind|$name"]="X $c"
        bad "$kind: $name: $c, one process: $(cell "${ref[$kind$reflayout]}") (${ms} ms)" "$out"
      fi
    done
  done
done

# The matrix: failure kind x setup.
echo
echo "Status of participants P0 P1 P2 P3 (P3 = replica 1 core 1, the culprit; lower case: what it"
echo "returned without calling the collective). INV invalid argument, DL deadline exceeded, FP failed"
echo "precondition, ABRT aborted. '=': every participant as in one process (status, culprit named); 'X': not."
printf '%-22s' setup
for kind in $KINDS; do printf ' | %-22s' "$kind"; done
echo
for s in "${setups[@]}"; do
  printf '%-22s' "$s"
  for kind in $KINDS; do printf ' | %-22s' "${table[$kind|$s]}"; done
  echo
done
echo "check_verdict: $passed passed, $failed failed"
[ "$failed" = 0 ]
