#!/usr/bin/env python3
"""check_served.py TRAJ_DIR BUFFER...: after a crash, what a weight buffer
serves is never corrupt. A buffer in state READY at version v holds exactly
TRAJ_DIR/step-v.safetensors' data (sha256, independent of the codec); a
buffer mid-commit (1) or awaiting a keyframe resync (2) serves nothing, and
its sequence counter is odd so readers know. Prints one word per buffer:
ready, committing or resync."""
import sys

from check_buffers import checkpoint_sha, read_buffer

traj = sys.argv[1]
ok = True
for path in sys.argv[2:]:
    version, state, seq, sha = read_buffer(path)
    if state == 0:
        want = checkpoint_sha("%s/step-%04d.safetensors" % (traj, version))
        if sha != want or seq % 2:
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
