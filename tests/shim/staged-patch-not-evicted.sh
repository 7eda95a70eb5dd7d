#!/bin/sh
# staged-patch-not-evicted.sh BFPATCH SHIM (set-up in lib.sh):
# safe-point commits with four complete patches staged (0 -> 4, every
# slot busy): a keyframe stream of version 1 arriving then is dropped, not
# put in place of the patch 3 -> 4
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"

traj5
traj5_patches 0 1 2 3
traj5_keyframes 1
start_shim sp --init "$T/traj5/step-0000.safetensors" --commit safe-point \
	--upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 25)) --exit-after 30
python3 - $((port + 25)) "$HERE" "$T" <<'PY' || fail "sending four patches and keyframes"
import socket, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def send(path):
    for f in frames(path):
        s.sendto(f, ("127.0.0.1", int(sys.argv[1])))
        time.sleep(0.0002)
for i in range(4):
    send(sys.argv[3] + "/q%d" % i)
time.sleep(0.5)
send(sys.argv[3] + "/qk1")
time.sleep(0.5)
PY
python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(92); f.write(struct.pack('<I', 4))  # the actor allows version 4" "$SHM.sp"
wait_line "committed version .* -> 4" "$T/shimsp.log" ||
	fail "a redundant keyframe stream replaced a staged patch: $(grep committed "$T/shimsp.log")"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj5/step-0004.safetensors" "$SHM.sp" || fail "four staged patches"
echo "ok - a redundant keyframe stream never evicts a staged patch"
