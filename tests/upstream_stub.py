"""upstream_stub.py PORT KEYFILE RUN SECONDS: stands for a publisher where a
test feeds a shim frames of its own (a pcap through a DPDK port): on
127.0.0.1:PORT, answers every JOIN with a HEARTBEAT (model 0: any,
version 0) signed with KEYFILE and bound to RUN (hex), fresh, as a
publisher does (docs/PROTOCOL.md 2.3 and 4), and repeats it once a second
to the last JOIN's sender; tests/authtool.py signs. Runs for SECONDS."""
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)) + "/relay")
import authtool  # noqa: E402
from tap_peers import ctl  # noqa: E402

port, keyfile, run, secs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3], 16), float(sys.argv[4])
kid, key = authtool.read_key(keyfile)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", port))
peer, nxt, end = None, 0.0, time.monotonic() + secs
print("upstream stub on %d, run %016x" % (port, run), flush=True)
while time.monotonic() < end:
    r, _, _ = select.select([s], [], [], 0.1)
    if r:
        m, src = s.recvfrom(65536)
        if m[:4] == b"BFPC" and len(m) > 5 and m[5] == 1:  # a JOIN
            peer, nxt = src, 0.0
    if peer and time.monotonic() >= nxt:
        s.sendto(authtool.seal(kid, key, ctl(4, 0, 0), run, int(time.time() * 1e6)), peer)
        nxt = time.monotonic() + 1.0
