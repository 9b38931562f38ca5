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
