#!/bin/sh
# four-shims-nack-forged.sh BFPATCH SHIM (set-up in lib.sh):
# `bfpatch publish` publishes 3 steps of a synthetic trajectory to 4
# `bfpatch-shim` daemons (one first gets a forged frame, which it must
# refuse; one loses a frame on purpose and NACKs it; one loses the last
# frame of version 1, the one that tells a streamed patch's frame count,
# and must NACK the patch's tail); after the run each weight buffer must
# equal the trainer's last BF16 checkpoint, checked by sha256 of the bytes
# (Python's hashlib).
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj

# frames of version 1 (the publisher's frame size is the default, too)
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p01"
n01=$("$BFP" info --json "$T/p01" | python3 -c 'import json, sys; print(json.load(sys.stdin)["frames"])')
for i in 1 2 3 4; do
	drop=""
	[ $i = 3 ] && drop="--drop-every 5"
	[ $i = 4 ] && drop="--drop-every $n01"
	"$SHIM" $AUTH --buffer "$SHM.$i" --init "$T/traj/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + i)) \
		--exit-after 40 $drop > "$T/shim$i.log" 2>&1 &
	PIDS="$PIDS $!"
done
# shim 2 first gets a forged frame of version 1 (a payload byte changed,
# the CRC made to match): preparing it must refuse it and write nothing,
# and the real frame must take its place
wait_line "listening on" "$T/shim2.log"
python3 - "$T/p01" $((port + 2)) "$HERE" <<'PY' || fail "forging a frame"
import socket, struct, sys
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/relay"]
from kat_check import crc32c
from tap_peers import frames
f = bytearray(frames(sys.argv[1])[3])
f[60 + (len(f) - 60) // 2] ^= 0x10
struct.pack_into("<I", f, 28, 0)  # streamed
struct.pack_into("<I", f, 56, crc32c(bytes(f[60:]), crc32c(bytes(f[:56]))))
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(f, ("127.0.0.1", int(sys.argv[2])))
PY
"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 4 \
	--steps 3 --linger 2 > "$T/publish.log" 2>&1 || fail publish
for i in 1 2 3 4; do
	wait_line "committed version 2 -> 3" "$T/shim$i.log"
done
for p in $PIDS; do kill -TERM "$p"; done
wait
PIDS=""
check_buffers "$T/traj/step-0003.safetensors" "$SHM.1" "$SHM.2" "$SHM.3" "$SHM.4" || fail "buffers"
grep -q "NACKs [1-9]" "$T/shim3.log" || fail "the lossy shim sent no NACK"
grep -q "NACKs [1-9]" "$T/shim4.log" || fail "the shim that lost the last frame sent no NACK"
grep -q "frame 3 of version 1 refused" "$T/shim2.log" || fail "the forged frame was not refused"
grep -q "prepared while staged [0-9]* (refused 1," "$T/shim2.log" || fail "shim 2's refusals"
grep "bfpatch-shim: version" "$T"/shim*.log | sed 's/.*bfpatch-shim: //'
grep "NACKs answered" "$T/publish.log" | sed 's/.*bfpatch publish: //'
echo "ok - publish -> 4 shims bit-exact over 3 steps, NACK repair (a lost frame; a lost last frame of a streamed patch), a forged frame refused before commit"
