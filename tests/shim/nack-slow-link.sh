#!/bin/sh
# nack-slow-link.sh BFPATCH SHIM (set-up in lib.sh):
# a NACK from a subscriber on a slow link (its JOIN says 2 Mbit/s) is
# answered with about 100 ms of that link (19 frames), not the whole
# patch: the answer is paced at that link and the publisher waits for it
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj

"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 6 > "$T/publish47.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" <<'PY' || fail "a NACK answer to a slow link"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, frames_for, join, receiver
port = int(sys.argv[1])
s = receiver()
join(s, port, 0, rate=2000)
first = frames_for(s, 20, 1.0)
n = len(first)
assert n > 40, "patch too small for this check (%d frames)" % n
model = struct.unpack_from("<Q", first[0], 8)[0]
target = struct.unpack_from("<I", first[0], 20)[0]
s.sendto(ctl(3, model, target, ranges=[(0, n)]), ("127.0.0.1", port))
again = frames_for(s, 5, 1.0)
# 100 ms of 2 Mbit/s: 19 frames (10 when it was ten 10 ms slices)
assert 15 <= len(again) <= 25, "a NACK of %d frames from a 2 Mbit/s link got %d back" % (n, len(again))
print("a NACK of %d frames from a 2 Mbit/s link: %d frames back" % (n, len(again)))
PY
wait $PUB || fail "publish (a NACK from a slow link)"
echo "ok - a NACK from a slow link answered with about 100 ms of it"
