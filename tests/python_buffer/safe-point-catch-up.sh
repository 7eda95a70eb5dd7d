#!/bin/sh
# safe-point-catch-up.sh BFPATCH SHIM (set-up in lib.sh): an actor three
# versions behind catches up at one safe point: the shim stages the
# newest version its complete patches reach.
set -u
. "$(dirname "$0")/lib.sh"
"$BFP" synth -o "$T/traj3" -p 500k -n 3 -S 6 2>/dev/null || exit 1
"$SHIM" $K --buffer "$SHM.4" --init "$T/traj3/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 4)) --commit safe-point --exit-after 60 > "$T/shim4.log" 2>&1 &
PIDS="$!"
sleep 0.5
"$BFP" publish $K --dir "$T/traj3" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
	--linger 8 > "$T/publish4.log" 2>&1 &
PIDS="$PIDS $!"
$PY - "$SHM.4" "$HERE/../host_shim/python" > "$T/py4.log" 2>&1 <<'PYEOF'
import sys, time
sys.path.insert(0, sys.argv[2])
from bfpatch_buffer import WeightBuffer
buf = WeightBuffer(sys.argv[1])
end = time.monotonic() + 30
while buf.staged < 3 and time.monotonic() < end:
    time.sleep(0.01)
assert buf.staged == 3 and buf.version == 0, (buf.staged, buf.version)
v = buf.safe_point(timeout=20)
assert v == 3, v
print("versions 1-3 committed at one safe point")
PYEOF
rc=$?
for p in $PIDS; do kill "$p" 2>/dev/null; done
wait
PIDS=""
cat "$T/py4.log"
[ $rc = 0 ] || { cat "$T/shim4.log" "$T/publish4.log"; echo "FAIL: catching up at one safe point"; exit 1; }
python3 "$HERE/check_buffers.py" "$T/traj3/step-0003.safetensors" "$SHM.4" || exit 1
echo "ok - an actor three versions behind catches up at one safe point"
