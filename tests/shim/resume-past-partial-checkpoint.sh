#!/bin/sh
# resume-past-partial-checkpoint.sh BFPATCH SHIM (set-up in lib.sh):
# publish --resume while the latest checkpoint is being written in place
# (preallocated: zeros, the right size): it starts at the step before,
# and publishes the latest once it is whole, never its zeros
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/rpre"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/rpre/"
python3 "$HERE/write_in_place.py" "$T/traj/step-0002.safetensors" \
	"$T/rpre/step-0002.safetensors" 3 "$T/rpre.go" &
WR=$!
while [ ! -e "$T/rpre.go" ]; do sleep 0.05; done
start_shim rp --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 31)) --exit-after 40
"$BFP" publish $AUTH --dir "$T/rpre" --resume --listen 127.0.0.1:$port > "$T/publish31.log" 2>&1 &
PIDS="$PIDS $!"
wait $WR || fail "writing a checkpoint in place"
wait_line "committed version .* -> 2" "$T/shimrp.log" 200 || fail "the latest checkpoint was not published once whole"
kill -TERM $PIDS; wait; PIDS=""
grep -q "not whole yet (still being written); starting at the step before" "$T/publish31.log" ||
	fail "publish --resume did not say it started before a checkpoint being written: $(head -n 3 "$T/publish31.log")"
check_buffers "$T/traj/step-0002.safetensors" "$SHM.rp" ||
	fail "publish --resume published a checkpoint while it was being written"
echo "ok - publish --resume past a checkpoint being written"
