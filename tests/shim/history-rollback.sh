#!/bin/sh
# history-rollback.sh BFPATCH SHIM (set-up in lib.sh):
# a history kept before the trainer rolled back: step 2 is now another
# run's (traj2), the kept patch 1 -> 2 is not; publish --resume --history
# must not serve it, and a shim at 1 ends at the new step 2
set -u
. "$(dirname "$0")/lib.sh"
traj

"$BFP" synth -o "$T/trajb" -p 2M -n 2 -S 18 2>/dev/null || fail "synth (another run)"
mkdir "$T/rb" "$T/rbh"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/rb/"
"$BFP" diff -q -b 1 "$T/traj/step-0001.safetensors" "$T/traj/step-0002.safetensors" \
	-o "$T/rbh/v00000001-v00000002.bfp" || fail "the kept patch"
python3 - "$T/traj/step-0001.safetensors" "$T/trajb/step-0002.safetensors" "$T/rb/step-0002.safetensors" <<'PY' || fail "another step 2"
import struct, sys
a = open(sys.argv[1], "rb").read()
b = open(sys.argv[2], "rb").read()
n = struct.unpack_from("<Q", a)[0]
# run A's layout, other weights: step 1 with a block of run B's values
d = bytearray(a)
d[8 + n + 4096:8 + n + 4096 + 200000] = b[8 + n + 4096:8 + n + 4096 + 200000]
open(sys.argv[3], "wb").write(bytes(d))
PY
start_shim rh --init "$T/traj/step-0001.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 33)) --exit-after 40
buffer_set "$SHM.rh" 1 - # the --init buffer is at 0: call it 1
"$BFP" publish $AUTH --dir "$T/rb" --resume --history "$T/rbh" --listen 127.0.0.1:$port \
	> "$T/publish33.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 1 -> 2" "$T/shimrh.log" 200 || fail "no version 2 after a rollback: $(tail -n 2 "$T/publish33.log")"
kill -TERM $PIDS; wait; PIDS=""
grep -q "the patch to version 2 does not end at checkpoint 2" "$T/publish33.log" ||
	fail "a patch kept from before a rollback was not refused: $(head -n 4 "$T/publish33.log")"
check_buffers "$T/rb/step-0002.safetensors" "$SHM.rh" || fail "a patch kept from before a rollback was served"
echo "ok - a patch kept from before a rollback refused"
