#!/bin/sh
# keyframe-no-holdback.sh BFPATCH SHIM (set-up in lib.sh):
# a keyframe stream to a late joiner (paced at 4 Mbit/s here: seconds)
# does not hold the next version back: its first frames leave while the
# stream goes on, and the stream still arrives whole
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/kcu"
cp "$T/traj/step-0000.safetensors" "$T/kcu/"
"$BFP" publish $AUTH --dir "$T/kcu" --listen 127.0.0.1:$port --rate 4m --linger 1 \
	> "$T/publish37.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" "$T/traj/step-0001.safetensors" "$T/kcu" <<'PY' || fail "a keyframe stream holding a new version back"
import os, shutil, socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import join, receiver
port = int(sys.argv[1])
s = receiver()
join(s, port, 0xFFFFFFFE)
key, count, patch_at, key_after, end = set(), 0, None, 0, time.monotonic() + 40
while time.monotonic() < end and not (count and len(key) == count and patch_at is not None):
    try:
        d = s.recv(65536)
    except socket.timeout:
        continue
    if d[:4] != b"BFPT":
        continue
    base, target, index, n = struct.unpack_from("<IIII", d, 16)
    if target == 0:  # the keyframe stream of version 0
        if not key:  # it started: the trainer writes step 1
            shutil.copy(sys.argv[3], sys.argv[4] + "/.t")
            os.rename(sys.argv[4] + "/.t", sys.argv[4] + "/step-0001.safetensors")
        key.add(index)
        count = n
        key_after += patch_at is not None
    elif target == 1 and patch_at is None:
        patch_at = len(key)
assert count and len(key) == count, "keyframe stream: %d of %d frames" % (len(key), count)
assert patch_at is not None, "no frame of version 1"
assert key_after > 0, "version 1 left only after the whole keyframe stream (%d frames)" % count
print("version 1 began after %d of the %d keyframes" % (patch_at, count))
PY
kill $PUB 2>/dev/null; wait $PUB 2>/dev/null
echo "ok - a keyframe stream not holding a new version back"
