#!/bin/sh
# small-stage-budget.sh BFPATCH SHIM (set-up in lib.sh):
# a staging budget too small for both the frames and their prepared
# changes (an 8M-parameter model, --max-stage 1 MiB): preparation takes at
# most half and gives way, no frame is refused for room, and the version
# commits bit-exact without a resync; the publisher sends self-contained
# sparse frames (--self-contained: encoding 1, no model), as its history
# shows
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"

"$BFP" synth -o "$T/big" -p 8M -n 1 -S 9 2>/dev/null || fail "synth 8M"
mkdir -p "$T/hist9"
start_shim m --init "$T/big/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 13)) --max-stage 1048576 --exit-after 120
"$BFP" publish $AUTH --dir "$T/big" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 --self-contained --history "$T/hist9" > "$T/publish9.log" 2>&1 ||
	fail "publish the 8M model"
# (an 8M-parameter commit on a loaded 2-core machine: up to a minute)
wait_line "committed version 0 -> 1" "$T/shimm.log" 600 ||
	fail "version 1 was not committed: $(tail -n 3 "$T/shimm.log")"
# frames in an encoding this build does not read (from a newer publisher):
# dropped and counted, and said once in the log
/usr/bin/python3 - $((port + 13)) "$HERE" <<'PY' || fail "sending frames of an unknown encoding"
import socket, struct, sys
sys.path.insert(0, sys.argv[2])
from kat_check import crc32c
h = struct.pack("<IBBHQIIIIQIIQ", 0x54504642, 1, 200, 0, 1, 0, 1, 0, 1, 0, 1, 2, 0)
payload = b"\x00\x00"
frame = h + struct.pack("<I", crc32c(payload, crc32c(h))) + payload
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    s.sendto(frame, ("127.0.0.1", int(sys.argv[1])))
PY
wait_line "frames in encoding 200" "$T/shimm.log" || fail "an unknown encoding was not reported"
kill -TERM $PIDS; wait; PIDS=""
[ "$(grep -c "frames in encoding 200" "$T/shimm.log")" = 1 ] || fail "an unknown encoding reported more than once"
grep -q "committed version 0 -> 1: " "$T/shimm.log" || fail "small budget: no plain commit"
grep -q "over budget 0)" "$T/shimm.log" || fail "small budget: frames refused for room"
check_buffers "$T/big/step-0001.safetensors" "$SHM.m" || fail "small budget buffer"
"$BFP" info --json "$T/hist9/v00000000-v00000001.bfp" | python3 -c "
import json, sys
f = json.load(sys.stdin)['frames_by_encoding']
sys.exit(0 if f['sparse'] > 0 and f['sparse_with_model'] == 0 else 1)" ||
	fail "publish --self-contained sent frames that carry a model"
echo "ok - a small staging budget shared with prepared changes, self-contained frames (encoding 1), frames of an unknown encoding dropped and said once"
