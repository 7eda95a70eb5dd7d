#!/bin/sh
# resume-makes-patch.sh BFPATCH SHIM (set-up in lib.sh):
# publish --resume holding no patch to its version (a publisher killed
# while it published it): it makes the patch from the step before, and a
# subscriber at that step catches up with it, not with a keyframe stream
set -u
. "$(dirname "$0")/lib.sh"
traj
steps_dir at2 0 1 2

start_shim mk --init "$T/traj/step-0001.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 35)) --exit-after 30
buffer_set "$SHM.mk" 1 - # the --init buffer is at 0: call it 1
"$BFP" publish $AUTH --dir "$T/at2" --resume --listen 127.0.0.1:$port > "$T/publish35.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 1 -> 2" "$T/shimmk.log" 200 || fail "no catch-up after a restart: $(tail -n 2 "$T/publish35.log")"
kill -TERM $PIDS; wait; PIDS=""
grep -q "holds patch 1 -> 2, made from the checkpoints" "$T/publish35.log" || fail "the patch to the resumed version was not made"
grep "committed version 1 -> 2" "$T/shimmk.log" | grep -q "keyframe" &&
	fail "a restarted publisher caught a subscriber one step behind up with keyframes"
check_buffers "$T/traj/step-0002.safetensors" "$SHM.mk" || fail "catch-up with a patch made at restart"
echo "ok - a restarted publisher catching up with a patch it made"
