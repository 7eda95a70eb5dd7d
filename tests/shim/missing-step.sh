#!/bin/sh
# missing-step.sh BFPATCH SHIM (set-up in lib.sh):
# a checkpoint directory with a step missing (a trainer that keeps every
# k-th step): the publisher goes on with the next step there (1 -> 3)
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/gap"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" \
	"$T/traj/step-0003.safetensors" "$T/gap/"
start_shim gp --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 32)) --exit-after 40
"$BFP" publish $AUTH --dir "$T/gap" --listen 127.0.0.1:$port --wait-subscribers 1 > "$T/publish32.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 1 -> 3" "$T/shimgp.log" 200 || fail "a missing step stopped the publisher: $(tail -n 2 "$T/publish32.log")"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0003.safetensors" "$SHM.gp" || fail "a patch over a missing step"
echo "ok - a missing step skipped"
