#!/bin/sh
# kernel-drops-counted.sh BFPATCH SHIM (set-up in lib.sh):
# datagrams the kernel drops for a full receive buffer (the shim stopped
# while 60,000 arrive) are counted and said (SO_RXQ_OVFL)
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj5
traj5_patches 0

start_shim kd --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 30)) --exit-after 30
kd=$(echo $PIDS | awk '{print $NF}')
kill -STOP $kd
python3 - "$T/q0" $((port + 30)) "$HERE" <<'PY' || fail "flooding a stopped shim"
import socket, sys
sys.path.insert(0, sys.argv[3] + "/relay")
from tap_peers import frames
fs = frames(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(60000):
    s.sendto(fs[i % len(fs)], ("127.0.0.1", int(sys.argv[2])))
PY
kill -CONT $kd
sleep 1
# the kernel tells the count with the next datagram it queues
python3 - "$T/q0" $((port + 30)) "$HERE" <<'PY'
import socket, sys
sys.path.insert(0, sys.argv[3] + "/relay")
from tap_peers import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for f in frames(sys.argv[1])[:3]:
    s.sendto(f, ("127.0.0.1", int(sys.argv[2])))
PY
wait_line "the kernel dropped" "$T/shimkd.log" || fail "kernel drops were not said"
kill -TERM $PIDS; wait; PIDS=""
grep -q "dropped by the kernel (socket full) [1-9]" "$T/shimkd.log" ||
	fail "kernel drops were not counted: $(tail -n 1 "$T/shimkd.log")"
echo "ok - kernel socket drops counted"
