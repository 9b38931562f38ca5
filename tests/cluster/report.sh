# Sourced by the multi-process checks (check_cluster.sh, check_mpi.sh): ok and bad
# count the checks; bad also prints the tail of the output it is given.
passed=0
failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() {
  echo "FAILED: $1" >&2
  [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 40 >&2
  failed=$((failed + 1))
}

# port_base N: prints a port P such that P..P+N-1 are free on 127.0.0.1 now, below the
# kernel's ephemeral range (where mpirun's and every other outgoing connection take
# ports at any moment). Fails after 50 tries.
port_base() {
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    ephemeral_low, ephemeral_high = (int(v) for v in f.read().split())
lo, hi = 20000, ephemeral_low - n
if hi <= lo:
    lo, hi = ephemeral_high + 1, 65536 - n
for _ in range(50):
    base = random.randrange(lo, hi)
    held = []
    try:
        for port in range(base, base + n):
            s = socket.socket()
            held.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        for s in held:
            s.close()
    print(base)
    sys.exit(0)
sys.exit("port_base: no %d free ports in a row below the ephemeral range" % n)
PY
}

# model_parallel_digests OUTPUT: the cluster worker's model_parallel digests (one line
# per layout and participant, and per replica's output, whichever task printed it),
# sorted: equal for two runs whose every result is bit for bit the same.
model_parallel_digests() {
  grep -o 'model_parallel[_a-z]* [^ ]* replica [0-9]* [a-z]* [0-9]* digest [0-9a-f]*' <<<"$1" | sort
}
# model_parallel_reference WORKER: one process of 8 cores runs WORKER's model_parallel
# scenario; sets mp_reference to its digests (empty if it failed; mp_reference_out:
# its output).
model_parallel_reference() {
  mp_reference_out=$(env -u TPURT_TRANSPORT TPURT_NUM_CORES=8 timeout 120 "$1" model_parallel 2>&1)
  local rc=$?
  mp_reference=$(model_parallel_digests "$mp_reference_out")
  if [ $rc -ne 0 ] || ! grep -qF "task 0: model_parallel ok" <<<"$mp_reference_out" ||
     [ "$(wc -l <<<"$mp_reference")" != 58 ]; then
    mp_reference=
  fi
}

# embedding_digests OUTPUT: the cluster worker's embedding digests (each replica's
# activations per step, each shard's rows per table and variable, whichever task
# printed them), sorted: equal for two runs whose every lookup and update is the same
# bit for bit.
embedding_digests() {
  grep -o 'embedding [a-z]* \(step\|table\) .* digest [0-9a-f]*' <<<"$1" | sort
}
# embedding_reference WORKER: one process of 4 cores runs WORKER's embedding scenario
# with each sharding strategy; sets emb_reference[div] and emb_reference[mod] to its
# digests (empty if it failed; emb_reference_out: the output of all).
declare -A emb_reference
embedding_reference() {
  local strategy out rc
  emb_reference_out=
  for strategy in div mod; do
    out=$(env -u TPURT_TRANSPORT TPURT_NUM_CORES=4 timeout 60 "$1" embedding $strategy 2>&1)
    rc=$?
    emb_reference[$strategy]=$(embedding_digests "$out")
    emb_reference_out+=$out$'\n'
    # 6 steps of 4 replicas and 2 of 2 replicas of 2 cores, and 4 shards of 9 variables
    # (users and tags: parameters and accumulators; items and flags: parameters; dense:
    # parameters, momenta and velocities).
    if [ $rc -ne 0 ] || ! grep -qF "task 0: embedding ok" <<<"$out" ||
       [ "$(wc -l <<<"${emb_reference[$strategy]}")" != 68 ]; then
      emb_reference[$strategy]=
    fi
  done
}
# embedding_run_ok N STRATEGY: the output in $out of N tasks' embedding scenario (rc in
# $rc) passed its checks, every task reported the failing steps, and its digests are
# one process's.
embedding_run_ok() {
  local n=$1 i
  [ "$rc" -eq 0 ] && [ -n "${emb_reference[$2]}" ] || return 1
  for ((i = 0; i < n; i++)); do grep -qF "task $i: embedding ok" <<<"$out" || return 1; done
  [ "$(grep -c 'task [0-9]*: embedding \(failure after gradients: DATA_LOSS\|id out of range: INVALID_ARGUMENT\|another learning rate: INVALID_ARGUMENT\|no computation on task 1\(, every row updated\)\?: FAILED_PRECONDITION\): ' <<<"$out")" = $((5 * n)) ] &&
    [ "$(embedding_digests "$out")" = "${emb_reference[$2]}" ]
}
