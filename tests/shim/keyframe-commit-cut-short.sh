#!/bin/sh
# keyframe-commit-cut-short.sh BFPATCH SHIM (set-up in lib.sh):
# a keyframe commit cut short (--crash-after: SIGKILL halfway through it):
# the restarted shim has nothing of that stream staged and asks for the
# rest of it (a NACK with the KEY flag; the patch to that version has
# another base), and finishes bit-exact without giving up on NACKs
set -u
. "$(dirname "$0")/lib.sh"
traj
steps_dir live 0 1 2 3

start_shim cutp --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 39)) --exit-after 40
"$BFP" publish $AUTH --dir "$T/live" --listen 127.0.0.1:$port --wait-subscribers 1 --keep 1 \
	--steps 3 --linger 15 > "$T/publish10.log" 2>&1 &
PUB=$!
wait_line "committed version 2 -> 3" "$T/shimcutp.log" || fail "publish for the cut keyframe commit"
"$SHIM" $AUTH --buffer "$SHM.cut" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 38)) --crash-after 1 > "$T/shimcut0.log" 2>&1 &
K=$!
PIDS="$PIDS $K"
for n in $(seq 150); do kill -0 $K 2>/dev/null || break; sleep 0.1; done
grep -q "middle of the commit to version 3" "$T/shimcut0.log" ||
	fail "the late joiner did not die in its keyframe commit"
start_shim cut --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 38)) \
	--events "$T/cut.events" --exit-after 30
wait_line "committed version" "$T/shimcut.log" 150 || fail "the keyframe commit cut short was not finished"
kill -TERM $PIDS $PUB 2>/dev/null; wait; PIDS=""
grep -q "was interrupted; finishing it" "$T/shimcut.log" || fail "no recovery message (keyframe commit)"
grep -q "unrepaired" "$T/shimcut.log" && fail "the restarted shim gave up on its NACKs"
python3 - "$T/cut.events" <<'PY' || fail "the first NACK after the restart did not ask for keyframes"
import json, sys
nacks = [e for e in map(json.loads, open(sys.argv[1])) if e["ev"] == "nack"]
assert nacks and nacks[0]["version"] == 3 and nacks[0]["key"] is True, nacks[:1]
PY
check_buffers "$T/traj/step-0003.safetensors" "$SHM.cut" || fail "keyframe commit finished after a crash"
echo "ok - a late joiner's keyframe commit cut short, finished from the rest of the stream"
