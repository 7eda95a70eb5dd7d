#!/usr/bin/env python3
"""check_served.py TRAJ_DIR BUFFER...: after a crash, what a weight buffer
serves is never corrupt. A buffer in state READY at version v holds exactly
TRAJ_DIR/step-v.safetensors' data (sha256, independent of the codec); a
buffer mid-commit (1) or awaiting a keyframe resync (2) serves nothing, and
its sequence counter is odd so readers know. Prints one word per buffer:
ready, committing or resync."""
import hashlib
import struct
import sys

traj = sys.argv[1]
ok = True
for path in sys.argv[2:]:
    b = open(path, "rb").read()
    if b[:8] != b"BFPWBUF1":
        sys.exit("%s: not a weight buffer" % path)
    version, state = struct.unpack_from("<II", b, 64)
    seq = struct.unpack_from("<Q", b, 80)[0]
    off, n = struct.unpack_from("<QQ", b, 48)
    if state == 0:
        d = open("%s/step-%04d.safetensors" % (traj, version), "rb").read()
        want = hashlib.sha256(d[8 + struct.unpack_from("<Q", d)[0]:]).digest()
        if hashlib.sha256(b[off:off + n]).digest() != want or seq % 2:
            print("%s: CORRUPT: ready at version %d but the bytes differ" % (path, version))
            ok = False
            continue
        print("ready")
    elif state in (1, 2) and seq % 2 == 1:
        print("committing" if state == 1 else "resync")
    else:
        print("%s: BAD STATE %d (seq %d)" % (path, state, seq))
        ok = False
sys.exit(0 if ok else 1)
