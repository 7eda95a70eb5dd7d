"""auth_inject.py PATCH KEYFILE HOST:PORT CTL_HOST:CTL_PORT: hostile datagrams
against a shim that holds KEYFILE's key, and a publisher's control port.

Signs the patch's frames with the key itself (tests/authtool.py,
independent of the C code under test: docs/PROTOCOL.md section 4), then
sends every frame only in damaged forms: one bit flipped at a random
place (frame or trailer), truncated, unsigned, signed with a wrong key of
the same id, signed under an unknown key id. Then a JOIN and a NACK to the
publisher's control port: one stale (signed 31 s ago), one replayed.
Prints how many datagrams of each kind it sent."""
import random
import socket
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0] + "/relay")
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tap_peers import ctl as ctl_message, frames as patch_frames  # noqa: E402  (ctl written from PROTOCOL.md)
import authtool  # noqa: E402

patch, keyfile, dst, ctl = sys.argv[1:5]
kid, key = authtool.read_key(keyfile)
host, port = dst.split(":")
chost, cport = ctl.split(":")
rng = random.Random(5)


def trailer(msg, k, key_id, t_us=0):
    return authtool.seal(key_id, k, msg, 0, t_us)[len(msg):]


frames = patch_frames(patch)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = {}


def send(kind, b, to=(host, int(port))):
    s.sendto(b, to)
    sent[kind] = sent.get(kind, 0) + 1
    time.sleep(0.0005)


wrong = bytes(x ^ 0xFF for x in key)
for f in frames:
    good = f + trailer(f, key, int(kid))
    flip = bytearray(good)
    i = rng.randrange(len(flip))
    flip[i] ^= 1 << rng.randrange(8)
    send("bit-flipped", bytes(flip))
    send("truncated", good[:rng.randrange(1, len(good))])
    send("unsigned", f)
    send("wrong key", f + trailer(f, wrong, int(kid)))
    send("unknown key id", f + trailer(f, key, int(kid) + 100))
# control messages: a JOIN (data port 9) and a NACK, each signed properly
# but 31 s old, then a fresh JOIN sent twice (the second is a replay)
now = int(time.time() * 1e6)
to = (chost, int(cport))
for m in (ctl_message(1, 0, 0, data_port=9), ctl_message(3, 0, 1, ranges=[(0, 5)])):  # JOIN, NACK
    send("stale control", m + trailer(m, key, int(kid), now - 31_000_000), to)
m = ctl_message(1, 0, 0, data_port=9)
fresh = m + trailer(m, key, int(kid), now)
send("control (first copy)", fresh, to)
send("replayed control", fresh, to)
print("sent " + ", ".join("%d %s" % (n, k) for k, n in sent.items()))
