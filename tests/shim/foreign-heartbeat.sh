#!/bin/sh
# foreign-heartbeat.sh BFPATCH SHIM (set-up in lib.sh):
# a HEARTBEAT from an address other than --upstream (version 5, which
# nobody has) is ignored: believed, the shim asked for version 1 in vain,
# then for keyframe streams after every commit
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj
steps_dir only0 0

start_shim hb --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 24)) --nack-ms 50 --exit-after 30
"$BFP" publish $AUTH --dir "$T/only0" --listen 127.0.0.1:$port > "$T/publish24.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "joined" "$T/publish24.log" || fail "the shim did not join"
python3 - $((port + 24)) "$HERE" <<'PY' || fail "sending a foreign HEARTBEAT"
import socket, sys
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(ctl(4, 0, 5), ("127.0.0.1", int(sys.argv[1])))  # model 0: any
PY
wait_line "HEARTBEAT (version 5) from an address other than --upstream ignored" "$T/shimhb.log" ||
	fail "a foreign HEARTBEAT was not reported"
sleep 2
kill -TERM $PIDS; wait; PIDS=""
grep -q "asking for a keyframe stream" "$T/shimhb.log" &&
	fail "a foreign HEARTBEAT made the shim give up on patches"
grep -q "NACKs 0," "$T/shimhb.log" || fail "a foreign HEARTBEAT made the shim NACK: $(tail -n 1 "$T/shimhb.log")"
grep -q "HEARTBEATs not from --upstream 1" "$T/shimhb.log" || fail "the foreign HEARTBEAT was not counted"
echo "ok - a foreign HEARTBEAT ignored"
