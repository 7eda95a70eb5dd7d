#!/bin/sh
# hostile-frame-counts.sh BFPATCH SHIM (set-up in lib.sh):
# hostile frame counts: four keyframes, each naming a stream of two
# million frames of another version, far more than any version of this
# 280k-parameter model can have: each is refused and reserves nothing
# (without that check their index arrays would take 40 MB each of
# --max-stage, 128 MiB)
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj5
traj5_keyframes 1

start_shim hs --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 29)) --max-stage 134217728 --exit-after 30
python3 - "$T/qk1" $((port + 29)) "$HERE" <<'PY' || fail "index arrays beyond --max-stage"
import socket, struct, sys, time
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/relay"]
from kat_check import crc32c
from tap_peers import frames
f0 = frames(sys.argv[1])[0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for v in (5, 6, 7, 8):
    f = bytearray(f0)
    struct.pack_into("<II", f, 20, v, 0)          # target version v, index 0
    struct.pack_into("<I", f, 28, 2000000)        # of 2,000,000 frames
    struct.pack_into("<I", f, 56, crc32c(bytes(f[60:]), crc32c(bytes(f[:56]))))
    s.sendto(bytes(f), ("127.0.0.1", int(sys.argv[2])))
    time.sleep(0.3)
PY
kill -TERM $PIDS; wait; PIDS=""
grep -q "ahead 4," "$T/shimhs.log" || fail "a hostile frame count was not refused: $(tail -n 1 "$T/shimhs.log")"
staged=$(sed -n 's/.*staged \([0-9]*\) bytes.*/\1/p' "$T/shimhs.log" | tail -n 1)
[ "$staged" = 0 ] || fail "staged $staged bytes for hostile frame counts"
echo "ok - hostile frame counts refused, nothing staged for them"
