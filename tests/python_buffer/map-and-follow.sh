#!/bin/sh
# map-and-follow.sh BFPATCH SHIM (set-up in lib.sh): the Python module
# (no build step) refuses damaged buffers and does not hang on a stuck
# one, maps a shim's weight buffer with numpy, zero-copy, and follows a
# commit.
set -u
. "$(dirname "$0")/lib.sh"
"$SHIM" $K --buffer "$SHM" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 1)) --exit-after 60 > "$T/shim.log" 2>&1 &
PIDS="$PIDS $!"
sleep 0.5
$PY "$HERE/python/check_buffer_errors.py" "$SHM" "$HERE/../host_shim/python" "$T" ||
	{ echo "not ok - the Python module on damaged or stuck buffers"; exit 1; }
$PY "$HERE/python/check_buffer.py" "$SHM" "$T/traj/step-0000.safetensors" \
	"$T/traj/step-0001.safetensors" "$HERE/../host_shim/python" > "$T/py.log" 2>&1 &
PYPID=$!
sleep 1
"$BFP" publish $K --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 > "$T/publish.log" 2>&1
wait $PYPID
rc=$?
cat "$T/py.log"
[ $rc = 0 ] || { cat "$T/shim.log" "$T/publish.log"; exit 1; }
echo "ok - Python refuses damaged buffers, maps the buffer zero-copy and follows a commit"
