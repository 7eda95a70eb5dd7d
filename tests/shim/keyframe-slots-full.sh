#!/bin/sh
# keyframe-slots-full.sh BFPATCH SHIM (set-up in lib.sh):
# every slot holds part of a keyframe stream (versions 1-4, the first half
# of each, never repaired): a whole keyframe stream of version 5 must
# still get a slot, in place of the one leading least far, and commit
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj5

traj5_keyframes 1 2 3 4
"$BFP" diff -q -k --target-version 5 "$T/traj5/step-0000.safetensors" \
	"$T/traj5/step-0004.safetensors" -o "$T/qk5" || fail "keyframes of version 5"
start_shim pk --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 36)) --exit-after 30
python3 - $((port + 36)) "$HERE" "$T" <<'PY' || fail "sending parts of keyframe streams"
import socket, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def send(fr):
    for f in fr:
        s.sendto(f, ("127.0.0.1", int(sys.argv[1])))
        time.sleep(0.0002)
for v in range(1, 5):
    fr = frames(sys.argv[3] + "/qk%d" % v)
    send(fr[:len(fr) // 2])
time.sleep(0.3)
send(frames(sys.argv[3] + "/qk5"))
PY
wait_line "committed version 0 -> 5" "$T/shimpk.log" ||
	fail "four parts of keyframe streams kept a whole one out: $(tail -n 3 "$T/shimpk.log")"
kill -TERM $PIDS; wait; PIDS=""
cp "$T/traj5/step-0004.safetensors" "$T/step-0005.safetensors" # its data, version 5
check_buffers "$T/step-0005.safetensors" "$SHM.pk" || fail "the keyframe stream of version 5"
echo "ok - parts of keyframe streams in every slot not keeping a whole one out"
