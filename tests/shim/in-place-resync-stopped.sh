#!/bin/sh
# in-place-resync-stopped.sh BFPATCH SHIM (set-up in lib.sh):
# a keyframe stream being written in place (buffer in RESYNC) when another
# keyframe stream, staged (streamed frames, count unknown), completes and
# commits version 1: the rest of the in-place stream must not be written
# into the buffer that now holds version 1
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj
make_buffer ip2 "$T/traj/step-0003.safetensors" 0 2 # version 0, RESYNC

"$BFP" diff -q -k --target-version 2 "$T/traj/step-0000.safetensors" \
	"$T/traj/step-0002.safetensors" -o "$T/k2" || fail "keyframes of version 2"
"$BFP" diff -q -k --target-version 1 "$T/traj/step-0000.safetensors" \
	"$T/traj/step-0001.safetensors" -o "$T/k1" || fail "keyframes of version 1"
start_shim ip2 --upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 21)) \
	--max-stage 2621440 --exit-after 30 # k2 (1.6 MB) above half, k1 fits
python3 - "$T/k2" "$T/k1" $((port + 21)) "$HERE" <<'PY' || fail "sending keyframe streams"
import socket, struct, sys, time
sys.path[:0] = [sys.argv[4], sys.argv[4] + "/relay"]
from kat_check import crc32c
from tap_peers import frames
k2, k1 = frames(sys.argv[1]), frames(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
to = ("127.0.0.1", int(sys.argv[3]))
def send(fs):
    for f in fs:
        s.sendto(f, to)
        time.sleep(0.0002)
send(k2[: len(k2) // 2])          # in place
time.sleep(0.5)
streamed = []
for f in k1:                      # streamed: frame_count 0
    f = bytearray(f)
    struct.pack_into("<I", f, 28, 0)
    struct.pack_into("<I", f, 56, crc32c(bytes(f[60:]), crc32c(bytes(f[:56]))))
    streamed.append(bytes(f))
send(streamed)
time.sleep(1.0)
send(k2[len(k2) // 2:])           # the rest of the in-place stream
time.sleep(0.5)
PY
wait_line "committed version 0 -> 1 (keyframe resync)" "$T/shimip2.log" || fail "the staged keyframe stream was not committed"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0001.safetensors" "$SHM.ip2" ||
	fail "a keyframe stream written in place wrote into a committed version"
echo "ok - an in-place resync stopped by a committed version"
