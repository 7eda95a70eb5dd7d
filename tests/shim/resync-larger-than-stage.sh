#!/bin/sh
# resync-larger-than-stage.sh BFPATCH SHIM (set-up in lib.sh):
# a keyframe resync larger than half of --max-stage (a 1.1M-parameter model,
# about 1.6 MB of keyframes (encoding 9), --max-stage 2.5 MiB; a 7B model at the
# default 1 GiB):
# written into the buffer as it arrives, a lost frame NACKed, verified
set -u
. "$(dirname "$0")/lib.sh"
traj
make_buffer ip "$T/traj/step-0003.safetensors" 0 2 # version 0, RESYNC
steps_dir at2 0 1 2

start_shim ip --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 18)) \
	--max-stage 2621440 --drop-every 100 --nack-ms 50 --exit-after 30
"$BFP" publish $AUTH --dir "$T/at2" --resume --listen 127.0.0.1:$port > "$T/publish17.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 0 -> 2 (keyframe resync, written in place)" "$T/shimip.log" 200 ||
	fail "a keyframe resync larger than --max-stage did not finish: $(tail -n 3 "$T/shimip.log")"
kill -TERM $PIDS; wait; PIDS=""
grep -q "NACKs [1-9]" "$T/shimip.log" || fail "the frame lost from the in-place resync was not NACKed"
grep -q "over budget 0)" "$T/shimip.log" || fail "in-place resync: frames refused for room"
check_buffers "$T/traj/step-0002.safetensors" "$SHM.ip" || fail "in-place keyframe resync"
echo "ok - a keyframe resync larger than --max-stage written in place, its lost frame NACKed"
