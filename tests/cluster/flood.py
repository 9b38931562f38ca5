#!/usr/bin/env python3
"""flood.py PORT SECONDS [SOURCES] [PER_SOURCE]: keeps PER_SOURCE connections (default
375) from each of SOURCES loopback addresses (default 8: 127.0.0.2, 127.0.0.3, ...)
open to 127.0.0.1:PORT, none of which ever sends a byte, reopening each one the server
closes, for SECONDS. SOURCES may also name the addresses, comma-separated (127.0.0.1:
the tasks' own). Prints how many connections it opened and how many the server closed.
For tests/check_cluster.sh and tests/check_cluster_lifetime.sh."""
import errno, resource, selectors, socket, sys, time

port, seconds = int(sys.argv[1]), float(sys.argv[2])
spec = sys.argv[3] if len(sys.argv) > 3 else '8'
addresses = spec.split(',') if '.' in spec else ['127.0.0.%d' % (2 + i) for i in range(int(spec))]
sources = len(addresses)
per_source = int(sys.argv[4]) if len(sys.argv) > 4 else 375
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, sources * per_source + 64)), hard))
sel = selectors.DefaultSelector()
opened = closed = 0

def open_one(src):
    global opened
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.bind((src, 0))
        s.connect_ex(('127.0.0.1', port))
    except OSError:
        s.close()
        return False
    opened += 1
    sel.register(s, selectors.EVENT_READ, src)
    return True

end = time.monotonic() + seconds
for src in addresses:
    for _ in range(per_source):
        open_one(src)
while time.monotonic() < end:
    for key, _ in sel.select(timeout=0.05):
        s = key.fileobj
        try:
            data = s.recv(4096)  # the server's challenge, its close or a refusal
        except OSError:
            data = b''
        if data:
            continue  # still open: it waits for our (never sent) answer
        sel.unregister(s)
        s.close()
        closed += 1
        open_one(key.data)
    missing = sources * per_source - len(sel.get_map())
    for i in range(missing):
        open_one(addresses[i % sources])
        if time.monotonic() >= end:
            break
print("flood: %d connections opened in %.0f s from %s, %d closed by the server"
      % (opened, seconds, ','.join(addresses) if sources < 4 else '%d addresses' % sources, closed))
