#!/bin/sh
# late-joiner-streamed.sh BFPATCH SHIM (set-up in lib.sh):
# two late joiners: the publisher is at version 2 and keeps one patch, so
# shims at version 0 need a keyframe stream of version 2. It leaves while
# it is encoded (frames with frame_count 0, the publisher's key_streamed
# counter), it is encoded once for both, and both buffers end equal to
# version 2
set -u
. "$(dirname "$0")/lib.sh"
traj
steps_dir live 0 1 2
"$BFP" publish $AUTH --dir "$T/live" --listen 127.0.0.1:$port --keep 1 --steps 2 --linger 8 \
	--events "$T/pub.jsonl" > "$T/publish-ks.log" 2>&1 &
PUB=$!
wait_line "version 1 -> 2:" "$T/publish-ks.log" || fail "no version 2"
start_shim j --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 7)) --exit-after 40
start_shim k --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 8)) --exit-after 40
for j in j k; do
	wait_line "committed version 0 -> 2 (keyframe resync)" "$T/shim$j.log" ||
		fail "no keyframe resync ($j)"
done
wait $PUB || fail "publish"
PUB=""
kill -TERM $PIDS; wait; PIDS=""
python3 - "$T/pub.jsonl" <<'PY' || fail "the keyframe stream was not streamed while encoded, once"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
st = [o for o in ev if o["ev"] == "stats"][-1]
assert st["key_streamed"] > 0, st
begins = [o for o in ev if o["ev"] == "key_encode_begin"]
ends = [o for o in ev if o["ev"] == "key_encode_end"]
assert len(begins) == 1 and len(ends) == 1, (begins, ends)
said = [o for o in ev if o["ev"] == "keyframe"]
assert len(said) == 2 and all(o["version"] == 2 for o in said), said
PY
check_buffers "$T/traj/step-0002.safetensors" "$SHM.j" "$SHM.k" ||
	fail "late joiners (streamed keyframes)"
echo "ok - two late joiners' keyframe stream leaves while it is encoded, encoded once"
