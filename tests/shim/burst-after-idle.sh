#!/bin/sh
# burst-after-idle.sh BFPATCH SHIM (set-up in lib.sh):
# after an idle spell the publisher's first frames leave at line rate only
# up to its token bucket's burst: a sendmmsg batch of 1200-byte frames
# (41 kB), not the 287 kB of a batch of the largest frames, which a
# bottleneck queue on a paced path would have to hold (kernel receive
# times, paced at 8 Mbit/s: by --rate; then by the rate the subscriber's
# JOIN gives, the publisher at its default 1 Gbit/s)
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/kbu"
cp "$T/traj/step-0000.safetensors" "$T/kbu/"
for how in "--rate 8m:0" ":8000"; do
	# shellcheck disable=SC2086 # ${how%:*} is an option and its value, or nothing
	"$BFP" publish $AUTH --dir "$T/kbu" --listen 127.0.0.1:$port ${how%:*} > "$T/publish38.log" 2>&1 &
	PUB=$!
	python3 - $port "$HERE" "${how#*:}" <<'PY' || fail "the burst after an idle spell (${how%:*}, JOIN rate ${how#*:} kbit/s)"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import join, receiver
port = int(sys.argv[1])
s = receiver(timeout=2)
s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS: kernel receive times
time.sleep(0.5)  # the bucket fills while idle
join(s, port, 0xFFFFFFFE, rate=int(sys.argv[3]))
got = []
while True:
    try:
        d, anc, _, _ = s.recvmsg(65536, 64)
    except socket.timeout:
        break
    if d[:4] != b"BFPT":
        continue
    sec, ns = struct.unpack("qq", anc[0][2][:16])
    got.append((sec + ns * 1e-9, len(d) + 42))
assert len(got) > 1000, "%d frames" % len(got)
t0 = got[0][0]
first = sum(n for t, n in got if t - t0 < 0.010)
total = sum(n for t, n in got)
rate = total / (got[-1][0] - t0)
assert first < 100000, "%d bytes within 10 ms of the first frame" % first
assert 0.7e6 < rate < 1.3e6, "paced at %.0f B/s, not 1 MB/s" % rate
print("burst after idle: %d bytes within 10 ms, then %.2f MB/s" % (first, rate / 1e6))
PY
	kill $PUB 2>/dev/null; wait $PUB 2>/dev/null
done
echo "ok - a small burst after an idle spell (paced by --rate, and by a JOIN's rate)"
