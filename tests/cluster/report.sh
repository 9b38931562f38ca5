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
