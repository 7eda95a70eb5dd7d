#!/bin/sh
# missing-step-other-model.sh BFPATCH SHIM (set-up in lib.sh):
# a missing step, then a checkpoint of another model (a file that never
# loads as this one), then a good one: the publisher says so, passes over
# both (it used to stop at the first) and publishes 1 -> 4; SIGUSR1
# prints its counters and it goes on
set -u
. "$(dirname "$0")/lib.sh"
traj
traj5

mkdir "$T/gap2"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/gap2/"
cp "$T/traj5/step-0000.safetensors" "$T/gap2/step-0003.safetensors"
cp "$T/traj/step-0003.safetensors" "$T/gap2/step-0004.safetensors"
start_shim g2 --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 45)) --exit-after 40
"$BFP" publish $AUTH --dir "$T/gap2" --listen 127.0.0.1:$port --wait-subscribers 1 > "$T/publish45.log" 2>&1 &
pub45=$!
PIDS="$PIDS $pub45"
wait_line "committed version 1 -> 4" "$T/shimg2.log" 200 ||
	fail "a missing step and another model's checkpoint stopped the publisher: $(tail -n 3 "$T/publish45.log")"
grep -q "step-0003.safetensors has another tensor layout" "$T/publish45.log" ||
	fail "the other model's checkpoint was not said: $(cat "$T/publish45.log")"
kill -USR1 $pub45
wait_line "at version 4; sent" "$T/publish45.log" 50 || fail "SIGUSR1 printed no counters"
kill -0 $pub45 || fail "SIGUSR1 ended the publisher"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/gap2/step-0004.safetensors" "$SHM.g2" ||
	fail "a patch over a missing step and another model's checkpoint"
echo "ok - a missing step and another model's checkpoint passed over; SIGUSR1 prints the counters"
