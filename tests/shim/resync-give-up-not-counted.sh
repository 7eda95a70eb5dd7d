#!/bin/sh
# resync-give-up-not-counted.sh BFPATCH SHIM (set-up in lib.sh):
# a buffer waiting for a keyframe resync (RESYNC, as after a failed
# verification): half of a keyframe stream that nobody repairs is NACKed
# until the shim gives up on it, which is no second resync (it is at one
# already), and the rest of the stream then commits
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj5
traj5_keyframes 1

"$SHIM" $AUTH --buffer "$SHM.rq" --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 40)) --exit-after 0.2 > /dev/null 2>&1
buffer_set "$SHM.rq" 0 2
start_shim rq --upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 40)) --nack-ms 20 \
	--exit-after 30
python3 - $((port + 40)) "$HERE" "$T" <<'PY' || fail "half a keyframe stream, then the rest"
import socket, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fr = frames(sys.argv[3] + "/qk1")
def send(part):
    for f in part:
        s.sendto(f, ("127.0.0.1", int(sys.argv[1])))
        time.sleep(0.0002)
send(fr[:len(fr) // 2])
end = time.monotonic() + 20
while "unrepaired after" not in open(sys.argv[3] + "/shimrq.log").read():
    assert time.monotonic() < end, "the shim never gave up on the keyframe stream's NACKs"
    time.sleep(0.1)
send(fr[len(fr) // 2:])
PY
wait_line "committed version 0 -> 1" "$T/shimrq.log" || fail "the keyframe stream after giving up"
kill -TERM $PIDS; wait; PIDS=""
grep -q "resyncs 0," "$T/shimrq.log" ||
	fail "giving up on a keyframe stream in RESYNC counted as a resync: $(grep -o 'resyncs [0-9]*' "$T/shimrq.log")"
check_buffers "$T/traj5/step-0001.safetensors" "$SHM.rq" || fail "the keyframe stream after giving up"
echo "ok - giving up on a keyframe stream in RESYNC not counted as another resync"
