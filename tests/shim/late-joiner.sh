#!/bin/sh
# late-joiner.sh BFPATCH SHIM (set-up in lib.sh):
# a late joiner: the publisher is at version 2 and keeps one patch, so a
# shim at version 0 gets a keyframe stream of version 2, then patch 3; the
# stream is in encoding 9 by default (FORMAT.md 3.12): fewer bytes than
# the values it carries
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/live"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" \
	"$T/traj/step-0002.safetensors" "$T/live/"
start_shim a --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 5)) --exit-after 40
"$BFP" publish $AUTH --dir "$T/live" --listen 127.0.0.1:$port --wait-subscribers 1 --keep 1 \
	--steps 3 --linger 2 > "$T/publish3.log" 2>&1 &
PUB=$!
wait_line "committed version 1 -> 2" "$T/shima.log"
start_shim b --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 6)) --exit-after 40
wait_line "keyframe resync" "$T/shimb.log"
cp "$T/traj/step-0003.safetensors" "$T/live/"
wait $PUB || fail "publish (late joiner)"
for f in shima shimb; do
	wait_line "committed version 2 -> 3" "$T/$f.log"
done
kill -TERM $PIDS; wait; PIDS=""
grep -q "committed version 0 -> 2 (keyframe resync)" "$T/shimb.log" || fail "no keyframe resync"
sed -n 's/.*committed version 0 -> 2 (keyframe resync): [0-9]* frames, \([0-9]*\) bytes, \([0-9]*\) bytes verified.*/\1 \2/p' \
	"$T/shimb.log" | { read -r got dense && [ "$got" -lt "$dense" ]; } ||
	fail "the keyframe stream is not smaller than the values (encoding 9): $(grep 'keyframe resync' "$T/shimb.log")"
# the joiner holds version 0 (readers use it): its keyframes are decoded
# into the shadow as they come (those that came while more waited in the
# socket at the commit), and the commit copies and checks them
sed -n 's/.*committed version 0 -> 2 (keyframe resync): \([0-9]*\) frames.*, \([0-9]*\) of the frames decoded and verified while staged.*/\1 \2/p' \
	"$T/shimb.log" | { read -r all staged && [ "$staged" -ge 1 ] && [ "$staged" -le "$all" ]; } ||
	fail "the joiner's keyframes were not decoded while staged: $(grep 'keyframe resync' "$T/shimb.log")"
check_buffers "$T/traj/step-0003.safetensors" "$SHM.a" "$SHM.b" || fail "late joiner"
echo "ok - late joiner via keyframes decoded as they come, then a patch"
