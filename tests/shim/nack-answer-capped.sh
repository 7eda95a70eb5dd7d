#!/bin/sh
# nack-answer-capped.sh BFPATCH SHIM (set-up in lib.sh):
# a NACK of 128 overlapping ranges (each the whole patch) is answered with
# at most 4096 frames (PROTOCOL.md 2.4), not 128 copies of the patch; the
# same NACK again at once gets what the subscriber's budget refilled
# (--nack-rate 100 frames/s), and another subscriber its own 4096
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj

"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 6 --nack-rate 100 > "$T/publish12.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" <<'PY' || fail "NACK amplification"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, frames_for, join, receiver
port = int(sys.argv[1])
s = receiver()
join(s, port, 0)
first = frames_for(s, 20, 1.0)
assert first, "no frames"
model = struct.unpack_from("<Q", first[0], 8)[0]
target = struct.unpack_from("<I", first[0], 20)[0]
n = len(first)
s.sendto(ctl(3, model, target, ranges=[(0, n)] * 128), ("127.0.0.1", port))
again = frames_for(s, 10, 1.0)
want = min(4096, 128 * n)
assert 128 * n > 4096, "patch too small for this check (%d frames)" % n
assert len(again) == want, "one NACK got %d frames back, want %d" % (len(again), want)
t0 = time.monotonic()
s.sendto(ctl(3, model, target, ranges=[(0, n)] * 128), ("127.0.0.1", port))
third = frames_for(s, 10, 1.0)
# 100 frames a second since the budget was spent; the answer was a few
# seconds ago at most
assert 20 <= len(third) <= 600, "a NACK over budget got %d frames" % len(third)
first_s, s = s, receiver()  # another subscriber (the first stays open)
join(s, port, 0)
caught = frames_for(s, 20, 1.0) # the patch, as a catch-up
s.sendto(ctl(3, model, target, ranges=[(0, n)] * 128), ("127.0.0.1", port))
fourth = frames_for(s, 10, 1.0)
assert len(fourth) == want, "another subscriber got %d frames, want %d" % (len(fourth), want)
print("one NACK of 128 x %d frames: %d frames resent; again: %d (budget); another "
      "subscriber: %d" % (n, len(again), len(third), len(fourth)))
PY
wait $PUB || fail "publish (NACK amplification)"
grep -q "[1-9][0-9]* NACKed frames over a subscriber's budget" "$T/publish12.log" ||
	fail "publish: frames over the NACK budget not counted"
echo "ok - NACK answers capped at 4096 frames and by the subscriber's budget"
