#!/bin/sh
# leave-join-keyframes.sh BFPATCH SHIM (set-up in lib.sh):
# a subscriber that LEAVEs and JOINs again for keyframes right after its
# keyframe stream gets the next one only once 3 s have passed since the
# first, as if it had stayed (each stream is the whole model); with
# --key-encoding raw the streams keep to format 1.0's encoding 3, with
# exp to 1.1's 7 (and 3), with expm to 1.2's 8 (and 3), and by default
# they are in 1.3's 9 (and 3)
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj
steps_dir kbu 0

"$BFP" publish $AUTH --dir "$T/kbu" --listen 127.0.0.1:$port --key-encoding raw \
	> "$T/publish39.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" <<'PY' || fail "LEAVE and JOIN again for another keyframe stream"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, join, receiver
port = int(sys.argv[1])
s = receiver(timeout=0.05)
def stream(until):
    """frames of keyframe streams received until then (or 0.3 s after the
    last one), and when the last came"""
    n, last = 0, None
    while time.monotonic() < until and not (last and time.monotonic() - last > 0.3):
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        if d[:4] == b"BFPT":
            assert d[5] == 3, "--key-encoding raw: a keyframe frame of encoding %d" % d[5]
            n, last = n + 1, time.monotonic()
    return n, last
time.sleep(0.3)
join(s, port, 0xFFFFFFFE)
n1, end1 = stream(time.monotonic() + 5)
assert n1 > 1000 and end1, "first keyframe stream: %d frames" % n1
s.sendto(ctl(2, 0, 0), ("127.0.0.1", port))  # LEAVE
join(s, port, 0xFFFFFFFE)                    # and JOIN again at once
n2, _ = stream(time.monotonic() + 1.0)
assert n2 == 0, "%d frames of another keyframe stream right after LEAVE and JOIN" % n2
for k in range(5):  # JOINs every second, as a shim sends them
    join(s, port, 0xFFFFFFFE)
    n3, _ = stream(time.monotonic() + 1.0)
    if n3:
        break
assert n3 > 0, "no keyframe stream once 3 s had passed"
print("after LEAVE and JOIN: none at once, the next %.1f s after the first" %
      (time.monotonic() - end1))
PY
kill $PUB 2>/dev/null; wait $PUB 2>/dev/null
for enc in default expm exp; do
	opt=""
	[ $enc = default ] || opt="--key-encoding $enc"
	"$BFP" publish $AUTH --dir "$T/kbu" --listen 127.0.0.1:$port $opt \
		> "$T/publish39-$enc.log" 2>&1 &
	PUB=$!
	python3 - $port "$HERE" $enc <<'PY' || fail "keyframe stream encodings ($enc)"
import socket, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import join, receiver
port, want = int(sys.argv[1]), {"default": 9, "expm": 8, "exp": 7}[sys.argv[3]]
s = receiver(timeout=0.05)
encs, n, last, until, joined = set(), 0, None, time.monotonic() + 10, 0
while time.monotonic() < until and not (last and time.monotonic() - last > 0.3):
    if not n and time.monotonic() - joined > 1:  # JOINs every second, as a shim
        join(s, port, 0xFFFFFFFE)
        joined = time.monotonic()
    try:
        d = s.recv(65536)
    except socket.timeout:
        continue
    if d[:4] == b"BFPT":
        encs.add(d[5])
        n, last = n + 1, time.monotonic()
assert n > 100 and want in encs and encs <= {3, want}, \
    "--key-encoding %s: %d frames of encodings %s" % (sys.argv[3], n, sorted(encs))
print("--key-encoding %s: %d frames of encodings %s" % (sys.argv[3], n, sorted(encs)))
PY
	kill $PUB 2>/dev/null; wait $PUB 2>/dev/null
done
echo "ok - LEAVE and JOIN again not buying a keyframe stream; keyframe streams in 9 by default, 8 and 7 with --key-encoding expm and exp"
