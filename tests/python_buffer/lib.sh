# lib.sh: what the Python module's scenarios (tests/python_buffer/*.sh
# BFPATCH SHIM) share. Each is one meson test that runs alone: sourced
# after `set -u`, this skips (77) without python3-numpy, sets BFP, SHIM,
# HERE (tests/), PY (the system Python, where numpy is), $port (the
# publisher's UDP port on 127.0.0.1; the shims listen just above it) and,
# through test_setup (test_lib.sh), $T, $SHM, $PIDS and the EXIT trap that
# ends the scenario's processes and removes its files however it ends;
# and makes $T/traj, steps 0-1 of a 500k-parameter model, and $T/key (bfpatch
# keygen), with $K, the --key every publisher and shim takes.
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
$PY -c "import numpy" 2>/dev/null || { echo "skip: needs python3-numpy"; exit 77; }
. "$HERE/test_lib.sh"
test_setup py
port=$((20000 + ($$ + 7) % 20000))
"$BFP" synth -o "$T/traj" -p 500k -n 1 -S 4 2>/dev/null || exit 1
"$BFP" keygen "$T/key" 2>/dev/null || exit 1
K="--key $T/key"

# safe_point_run K [tamper]: a shim in safe-point mode on buffer $SHM.K
# with check_safe_point.py as its actor, and one published step; logs
# shimK, pyK and publishK; exits with the logs if Python's checks fail
safe_point_run() {
	"$SHIM" $K --buffer "$SHM.$1" --init "$T/traj/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + $1)) --commit safe-point \
		--exit-after 60 > "$T/shim$1.log" 2>&1 &
	PIDS="$!"
	sleep 0.5
	$PY "$HERE/python/check_safe_point.py" "$SHM.$1" "$T/traj/step-0000.safetensors" \
		"$T/traj/step-0001.safetensors" "$HERE/../host_shim/python" ${2:-} > "$T/py$1.log" 2>&1 &
	PYPID=$!
	"$BFP" publish $K --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
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
