"""chaos_proxy.py LISTEN_PORT PUBLISHER_PORT SECONDS LOSS DUP REORDER SEED [KEY]: a
lossy, duplicating, reordering UDP path between a publisher and one shim on
loopback (tests/chaos_test.sh).

The shim's --upstream is 127.0.0.1:LISTEN_PORT. Control messages from the
shim go on to the publisher from a second socket, whose port replaces the
JOIN's data port (the CRC32C is recomputed, and with KEY, the shim's key
file, the JOIN signed again with the same key id, run and time:
tests/authtool.py), so frames and HEARTBEATs come back through the proxy. Each datagram towards the shim is dropped
with probability LOSS, sent twice with probability DUP, and held back
behind up to 20 later ones with probability REORDER. Prints the counts."""
import random
import select
import socket
import struct
import sys
import time

from kat_check import crc32c  # the independent CRC32C
import authtool  # the independent trailer

key = authtool.read_key(sys.argv[8]) if len(sys.argv) > 8 else None

lport, pport, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
loss, dup, reorder = (float(x) for x in sys.argv[4:7])
rng = random.Random(int(sys.argv[7]))


shim_side = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
shim_side.bind(("127.0.0.1", lport))
pub_side = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
pub_side.bind(("127.0.0.1", 0))
pub_side.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
my_data_port = pub_side.getsockname()[1]
shim_data = None
held = []
n = {"forwarded": 0, "dropped": 0, "duplicated": 0, "reordered": 0, "control": 0}
end = time.monotonic() + secs
while time.monotonic() < end:
    r, _, _ = select.select([shim_side, pub_side], [], [], 0.05)
    if shim_side in r:
        m, src = shim_side.recvfrom(65536)
        if m[:4] == b"BFPC" and len(m) >= 32 and m[5] == 1:  # JOIN: frames to us
            trailer = None
            if key:
                trailer = struct.unpack_from("<IIQQ", m, len(m) - authtool.LEN)
                m = m[:-authtool.LEN]
            shim_data = (src[0], struct.unpack_from("<H", m, 6)[0])
            m = m[:6] + struct.pack("<H", my_data_port) + m[8:-4]
            m += struct.pack("<I", crc32c(m))
            if trailer:
                m = authtool.seal(key[0], key[1], m, trailer[2], trailer[3])
        pub_side.sendto(m, ("127.0.0.1", pport))
        n["control"] += 1
    if pub_side in r and shim_data:
        m, _ = pub_side.recvfrom(65536)
        x = rng.random()
        if x < loss:
            n["dropped"] += 1
        elif x < loss + reorder:
            held.append([m, rng.randrange(1, 21)])
            n["reordered"] += 1
        else:
            shim_side.sendto(m, shim_data)
            n["forwarded"] += 1
            if rng.random() < dup:
                shim_side.sendto(m, shim_data)
                n["duplicated"] += 1
            for h in held:
                h[1] -= 1
            for h in [h for h in held if h[1] <= 0]:
                shim_side.sendto(h[0], shim_data)
                held.remove(h)
    if not r and held and shim_data:  # quiet: let the held ones go
        for h in held:
            shim_side.sendto(h[0], shim_data)
        held = []
print("proxy: " + ", ".join("%s %d" % kv for kv in n.items()))
