#!/bin/sh
# linger-with-subscribers.sh BFPATCH SHIM (set-up in lib.sh):
# --linger ends a finite run also while subscribers keep coming: the
# catch-ups begun by then are finished (a keyframe stream paced at the
# 8 Mbit/s its subscriber's JOIN asks for: seconds), and no new one is
# begun (a new subscriber every 1.5 s here)
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/lg"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/lg/"
"$BFP" publish $AUTH --dir "$T/lg" --listen 127.0.0.1:$port --steps 1 --linger 1 \
	> "$T/publish41.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" "$T/publish41.log" <<'PY' || fail "--linger with subscribers that keep coming"
import sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import join, receiver
port, log = int(sys.argv[1]), sys.argv[3]
t0, subs = time.monotonic(), []
def ended():
    return "; sent " in open(log).read()  # the publisher's last line
while not ended() and time.monotonic() - t0 < 16:
    if time.monotonic() - t0 >= 1.5 * len(subs):
        s = receiver()
        join(s, port, 0xFFFFFFFE, rate=8000)
        subs.append(s)
    time.sleep(0.05)
took = time.monotonic() - t0
assert ended() and took < 10, \
    "the publisher ran for %.1f s with --linger 1 (%d subscribers came)" % (took, len(subs))
print("--linger 1: the publisher ended after %.1f s, %d subscribers having come" %
      (took, len(subs)))
PY
wait $PUB
grep -q "keyframe stream of version 1" "$T/publish41.log" || fail "no catch-up before --linger ended"
echo "ok - --linger ending while subscribers keep coming"
