#!/bin/sh
# python_buffer_test.sh BFPATCH SHIM: the Python module (no build step)
# maps a shim's weight buffer with numpy, zero-copy, and follows a commit.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
$PY -c "import numpy" 2>/dev/null || { echo "skip: needs python3-numpy"; exit 77; }
. "$HERE/test_lib.sh"
test_setup py
port=$((20000 + ($$ + 7) % 20000))
"$BFP" synth -o "$T/traj" -p 500k -n 1 -S 4 2>/dev/null || exit 1
"$SHIM" --buffer "$SHM" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 1)) --exit-after 60 > "$T/shim.log" 2>&1 &
PIDS="$PIDS $!"
sleep 0.5
$PY "$HERE/python/check_buffer_errors.py" "$SHM" "$HERE/../host_shim/python" "$T" ||
	{ echo "not ok - the Python module on damaged or stuck buffers"; exit 1; }
$PY "$HERE/python/check_buffer.py" "$SHM" "$T/traj/step-0000.safetensors" \
	"$T/traj/step-0001.safetensors" "$HERE/../host_shim/python" > "$T/py.log" 2>&1 &
PYPID=$!
sleep 1
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 > "$T/publish.log" 2>&1
wait $PYPID
rc=$?
cat "$T/py.log"
[ $rc = 0 ] || { cat "$T/shim.log" "$T/publish.log"; exit 1; }
for p in $PIDS; do kill "$p"; done
wait
PIDS=""

# safe_point_run K [tamper]: a shim in safe-point mode on buffer $SHM.K
# with check_safe_point.py as its actor, and one published step; logs
# shimK, pyK and publishK; exits with the logs if Python's checks fail
safe_point_run() {
	"$SHIM" --buffer "$SHM.$1" --init "$T/traj/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + $1)) --commit safe-point \
		--exit-after 60 > "$T/shim$1.log" 2>&1 &
	PIDS="$!"
	sleep 0.5
	$PY "$HERE/python/check_safe_point.py" "$SHM.$1" "$T/traj/step-0000.safetensors" \
		"$T/traj/step-0001.safetensors" "$HERE/../host_shim/python" ${2:-} > "$T/py$1.log" 2>&1 &
	PYPID=$!
	"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
		--linger 8 > "$T/publish$1.log" 2>&1 &
	PIDS="$PIDS $!"
	wait $PYPID
	rc=$?
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	wait
	PIDS=""
	cat "$T/py$1.log"
	[ $rc = 0 ] || { cat "$T/shim$1.log" "$T/publish$1.log"; exit 1; }
}

# the safe-point handshake: the shim stages version 1 and waits for the actor
safe_point_run 2
grep -q "waiting for the actor's safe point" "$T/shim2.log" || { cat "$T/shim2.log"; exit 1; }
# while it waited, the shim decoded and verified every frame against the
# buffer, so the commit (whose bytes Python just compared) only wrote values
grep "committed version 0 -> 1" "$T/shim2.log" |
	grep -Eq ": ([0-9]+) frames, .*, \1 of the frames decoded and verified while staged" ||
	{ cat "$T/shim2.log"; echo "FAIL: not every frame was prepared while staged"; exit 1; }

# the actor writes into its weights after the shim prepared the patch:
# the commit checks every range after writing, refuses, and resyncs
safe_point_run 3 tamper
grep -q "failed verification" "$T/shim3.log" || { cat "$T/shim3.log"; echo "FAIL: the tampered commit was not refused"; exit 1; }
# an actor three versions behind catches up at one safe point: the shim
# stages the newest version its complete patches reach
"$BFP" synth -o "$T/traj3" -p 500k -n 3 -S 6 2>/dev/null || exit 1
"$SHIM" --buffer "$SHM.4" --init "$T/traj3/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 4)) --commit safe-point --exit-after 60 > "$T/shim4.log" 2>&1 &
PIDS="$!"
sleep 0.5
"$BFP" publish --dir "$T/traj3" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
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
echo "ok - Python maps the buffer zero-copy, follows a commit, and gates one at its safe point (from frames prepared while it waited); a weight the actor overwrote after the patch was prepared is caught at the commit; an actor three versions behind catches up at one safe point"
