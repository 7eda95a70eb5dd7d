"""check_buffer_errors.py BUFFER MODULE_DIR SCRATCH: the Python view of
a weight buffer refuses what is not a whole buffer, and does not hang on
one whose commit never ends. BUFFER is a shim's buffer at rest (READY);
its copies in SCRATCH are cut short or have their header words set by
hand (offsets from common/wbuf.h: state at 68, seq at 80)."""
import os
import struct
import sys
import time

sys.path.insert(0, sys.argv[2])
from bfpatch_buffer import WeightBuffer, RESYNC, COMMITTING  # noqa: E402

src, scratch = sys.argv[1], sys.argv[3]
whole = open(src, "rb").read()


def copy(name, data):
    p = os.path.join(scratch, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def refused(path, what):
    try:
        WeightBuffer(path)
    except ValueError as x:
        print("ok - %s refused: %s" % (what, x))
        return
    raise AssertionError("%s was opened" % what)


# cut short anywhere: before the header's end, inside the tensor table,
# inside the weights, one byte short
for cut in (0, 100, 5000, len(whole) // 2, len(whole) - 1):
    if cut == 0:
        p = copy("empty", b"")
    else:
        p = copy("cut%d" % cut, whole[:cut])
    refused(p, "a buffer cut to %d of %d bytes" % (cut, len(whole)))
refused(copy("garbage", os.urandom(8192)), "random bytes")

# read-only: opens, reads, and refuses to write the handshake
ro = WeightBuffer(src, writable=False)
assert ro.version == WeightBuffer(src).version
try:
    ro.allow(ro.version + 1)
    raise AssertionError("allow() wrote through a read-only buffer")
except PermissionError:
    print("ok - writable=False opens read-only and refuses allow()")
assert ro.consistent(lambda: ro.version) == ro.version
ro.close()


def with_words(name, state, seq):
    d = bytearray(whole)
    struct.pack_into("<I", d, 68, state)
    struct.pack_into("<Q", d, 80, seq)
    return WeightBuffer(copy(name, bytes(d)))


# a commit that never ends (its shim died and was not restarted)
b = with_words("stuck", COMMITTING, 1)
t0 = time.monotonic()
try:
    b.consistent(lambda: 0, timeout=0.3)
    raise AssertionError("consistent() returned during a commit")
except TimeoutError:
    dt = time.monotonic() - t0
    assert dt < 5, dt
    print("ok - consistent(timeout=0.3) gives up on a commit that never ends (%.2fs)" % dt)
# a buffer waiting for a keyframe resync holds no version
b = with_words("resync", RESYNC, 1)
try:
    b.consistent(lambda: 0)
    raise AssertionError("consistent() returned in RESYNC")
except RuntimeError:
    print("ok - consistent() in RESYNC says there is no valid version")
