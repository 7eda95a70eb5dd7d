#!/bin/sh
# jumbo-paced-keyframes.sh BFPATCH SHIM (set-up in lib.sh):
# jumbo frames, paced: a dense refresh (keyframe streams) in 9000-byte
# frames at 200 Mbit/s; each sendmmsg batch of them is more than 256 KiB
set -u
. "$(dirname "$0")/lib.sh"
traj

start_shim j --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 15)) --exit-after 30
timeout 30 "$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 \
	--steps 1 --keyframes --frame-size 9000 --rate 200m --linger 1 > "$T/publish11.log" 2>&1 ||
	fail "publish --frame-size 9000 --rate 200m did not finish"
wait_line "committed version 0 -> 1" "$T/shimj.log" || fail "jumbo keyframes not committed"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0001.safetensors" "$SHM.j" || fail "jumbo keyframes"
echo "ok - jumbo paced keyframe streams"
