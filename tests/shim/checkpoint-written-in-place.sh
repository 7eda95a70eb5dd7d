#!/bin/sh
# checkpoint-written-in-place.sh BFPATCH SHIM (set-up in lib.sh):
# a checkpoint written in place by a trainer that preallocates it (header
# and size right, data still zeros, then the data after a pause): the
# publisher takes it only once the writer closed it
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/inplace"
cp "$T/traj/step-0000.safetensors" "$T/inplace/"
start_shim w --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 17)) --exit-after 30
"$BFP" publish $AUTH --dir "$T/inplace" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 > "$T/publish16.log" 2>&1 &
PUB=$!
sleep 1
python3 "$HERE/write_in_place.py" "$T/traj/step-0001.safetensors" \
	"$T/inplace/step-0001.safetensors" 1.5 || fail "writing a checkpoint in place"
wait $PUB || fail "publish (a checkpoint written in place)"
wait_line "committed version 0 -> 1" "$T/shimw.log" || fail "the checkpoint written in place was not committed"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0001.safetensors" "$SHM.w" ||
	fail "a checkpoint was published while it was being written"
echo "ok - a checkpoint written in place taken once closed"
