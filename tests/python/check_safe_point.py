"""check_safe_point.py BUFFER STEP0 STEP1 MODULE_DIR [tamper]: with the
shim in --commit safe-point mode a complete version waits for the actor:
the buffer keeps version 0 (bytes equal to STEP0, read independently)
while version 1 is staged, and safe_point() commits it (bytes equal to
STEP1). With "tamper" the actor first writes into a weight the patch does
not change, after the shim prepared the patch against the old bytes: the
commit must notice (the range no longer hashes to its target) and end,
through a keyframe resync, at STEP1's bytes all the same."""
import hashlib
import sys
import time

sys.path.insert(0, sys.argv[4])
from bfpatch_buffer import WeightBuffer  # noqa: E402


def data_sha(path):
    d = open(path, "rb").read()
    n = int.from_bytes(d[:8], "little")
    return hashlib.sha256(d[8 + n:]).hexdigest()


def buf_sha(buf):
    return hashlib.sha256(bytes(buf._mm[buf.data_offset:buf.data_offset + buf.data_bytes])).hexdigest()


buf = WeightBuffer(sys.argv[1])
end = time.monotonic() + 60
while buf.staged < 1 and time.monotonic() < end:
    time.sleep(0.01)
assert buf.staged == 1, "the shim never staged version 1"
time.sleep(0.5)  # the shim must hold it, however long the actor takes
assert buf.version == 0 and buf.state == 0, (buf.version, buf.state)
assert buf.consistent(lambda: buf_sha(buf)) == data_sha(sys.argv[2]), "version 0 changed"
print("version 1 staged, version 0 still served unchanged")
tamper = len(sys.argv) > 5 and sys.argv[5] == "tamper"
if tamper:
    a, b = open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
    na = int.from_bytes(a[:8], "little")
    i = next(i for i in range(0, len(a) - 8 - na, 2) if a[8 + na + i:10 + na + i] == b[8 + na + i:10 + na + i])
    off = buf.data_offset + i
    buf._mm[off] ^= 1  # the actor scribbles on a weight of version 0
    print("actor wrote into byte %d of the weights, which version 1 does not change" % i)
v = buf.safe_point(timeout=30)
if tamper:  # the failed commit leaves no version; the keyframe resync brings 1
    v = buf.wait_version(after=0, timeout=60)
assert v == 1, v
assert buf.consistent(lambda: buf_sha(buf)) == data_sha(sys.argv[3]), "version 1 differs"
print("safe_point() committed version 1, bytes equal the trainer's checkpoint%s" %
      (" (after the commit refused the tampered range and a keyframe resync)" if tamper else ""))
