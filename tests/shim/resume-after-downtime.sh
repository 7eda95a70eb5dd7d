#!/bin/sh
# resume-after-downtime.sh BFPATCH SHIM (set-up in lib.sh):
# publish --resume after a downtime of two steps (the history holds 0 -> 1,
# the directory goes on to step 3): it makes 1 -> 2 and 2 -> 3 from the
# checkpoints, so a subscriber at 1 catches up with patches, not a
# keyframe stream; a patch file of the history not held (a version past
# the one resumed at, from before a rollback) is removed
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/dt" "$T/dth"
cp "$T/traj/step-000"[0-3].safetensors "$T/dt/"
"$BFP" diff -q -b 0 "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" \
	-o "$T/dth/v00000000-v00000001.bfp" || fail "the kept patch 0 -> 1"
cp "$T/dth/v00000000-v00000001.bfp" "$T/dth/v00000007-v00000008.bfp"
start_shim dt --init "$T/traj/step-0001.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 46)) --exit-after 40
buffer_set "$SHM.dt" 1 - # the --init buffer is at 0: call it 1
"$BFP" publish $AUTH --dir "$T/dt" --resume --history "$T/dth" --listen 127.0.0.1:$port \
	> "$T/publish46.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version .* -> 3" "$T/shimdt.log" 250 ||
	fail "no catch-up after a downtime of two steps: $(tail -n 3 "$T/publish46.log")"
kill -TERM $PIDS; wait; PIDS=""
for pv in "1 -> 2" "2 -> 3"; do
	grep -q "holds patch $pv, made from the checkpoints" "$T/publish46.log" ||
		fail "patch $pv was not made at restart: $(cat "$T/publish46.log")"
done
grep "committed version" "$T/shimdt.log" | grep -q "keyframe" &&
	fail "a subscriber two steps behind a restarted publisher got a keyframe stream"
[ ! -e "$T/dth/v00000007-v00000008.bfp" ] || fail "a history file not held was left"
[ -e "$T/dth/v00000001-v00000002.bfp" ] && [ -e "$T/dth/v00000002-v00000003.bfp" ] ||
	fail "the patches made at restart were not kept: $(ls "$T/dth")"
check_buffers "$T/traj/step-0003.safetensors" "$SHM.dt" || fail "catch-up after a downtime"
echo "ok - a publisher restarted after a downtime of two steps catching up with patches it made"
