#!/bin/sh
# join-other-model-and-move.sh BFPATCH SHIM (set-up in lib.sh):
# JOINs: one for another model is ignored (said once), and a repeated JOIN
# from the same control port with another data port moves the frames there
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj

"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 8 > "$T/publish34.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" "$T/traj/step-0000.safetensors" <<'PY' || fail "JOINs of another model, JOINs that move"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, receiver
port = int(sys.argv[1])
def sock():
    return receiver(timeout=0.2)
def count(s, seconds):
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            n += s.recv(65536)[:4] == b"BFPT"
        except socket.timeout:
            pass
    return n
other = sock()
other.sendto(ctl(1, 0x0123456789ABCDEF, 0, data_port=other.getsockname()[1]), ("127.0.0.1", port))
c, a, b = sock(), sock(), sock()
c.sendto(ctl(1, 0, 0, data_port=a.getsockname()[1]), ("127.0.0.1", port))
assert count(a, 3) > 0, "no frames at the first data port"
c.sendto(ctl(1, 0, 1, data_port=b.getsockname()[1]), ("127.0.0.1", port))
time.sleep(0.3)
count(a, 0.3)  # what was under way
c.sendto(ctl(3, 0, 1, ranges=[(0, 20)]), ("127.0.0.1", port))
got_b, got_a = count(b, 2), count(a, 0.5)
assert got_b > 0 and got_a == 0, "after the second JOIN: %d frames at its port, %d at the first" % (got_b, got_a)
assert count(other, 0.5) == 0, "frames for another model's subscriber"
PY
wait $PUB
grep -q "for model 0123456789abcdef, not this one" "$T/publish34.log" || fail "a JOIN for another model was not said"
grep -q " 1 JOINs for another model" "$T/publish34.log" || fail "a JOIN for another model was not counted"
echo "ok - JOINs of another model ignored and repeated JOINs followed"
