#!/bin/sh
# resync-nacks-during-stream.sh BFPATCH SHIM (set-up in lib.sh):
# a shim resyncing through a keyframe stream paced at 2 Mbit/s NACKs the
# frames it has not had yet while the stream goes on: those not yet sent
# are not answered (they come anyway), so the stream is sent about once
set -u
. "$(dirname "$0")/lib.sh"
traj
steps_dir kbu 0

"$SHIM" $AUTH --buffer "$SHM.rs" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 37)) --exit-after 0.2 > /dev/null 2>&1
buffer_set "$SHM.rs" 0 2 # RESYNC: no usable version
"$BFP" publish $AUTH --dir "$T/kbu" --listen 127.0.0.1:$port --rate 2m > "$T/publish40.log" 2>&1 &
PUB=$!
start_shim rs --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 37)) --nack-ms 50 --exit-after 60
wait_line "committed version 0 -> 0 (keyframe resync)" "$T/shimrs.log" 200 ||
	fail "the resyncing shim did not commit its keyframe stream"
kill $PUB 2>/dev/null; wait $PUB 2>/dev/null
kill -TERM $PIDS; wait; PIDS=""
sent=$(sed -n 's/.*; sent \([0-9]*\) frames.*/\1/p' "$T/publish40.log")
[ -n "$sent" ] && [ "$sent" -lt 2100 ] ||
	fail "a 1977-frame keyframe stream took $sent frames with NACKs during it: $(tail -n 1 "$T/publish40.log")"
echo "keyframe resync with NACKs during the stream: $sent frames sent for 1977"
echo "ok - NACKs during a keyframe stream not resending what is still to come"
