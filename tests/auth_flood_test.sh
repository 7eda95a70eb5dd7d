#!/bin/sh
# auth_flood_test.sh BFPATCH SHIM: one key holder cannot lock the others
# out of a publisher (docs/SECURITY.md "Replays"). While a flooder signs
# LEAVEs stamped 28 s ahead of the clock (beyond the tolerated skew) and
# sends them from its own port, thousands at once and then about 200 a
# second, an honest keyed shim JOINs the keyed publisher and commits the
# published version bit-exactly. The publisher refuses the LEAVEs as
# "future" and counts them apart from stale ones. No timing is asserted:
# each step waits for a log line with a generous limit.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup authflood
"$SHIM" --help | grep -q -- "--key FILE" || { echo "skip: built without libsodium"; exit 77; }
port=$((20000 + ($$ + 47) % 20000))
umask 077
make_key 1 "$T/k1"

"$BFP" synth -o "$T/traj" -p 1M -n 3 -S 23 2>/dev/null || fail synth

"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --key "$T/k1" --wait-subscribers 1 \
	--steps 2 --linger 2 > "$T/publish.log" 2>&1 &
PUB=$!

# the flooder: signed with the deployment key (tests/authtool.py,
# PROTOCOL.md section 4), each LEAVE stamped 28 s ahead and distinct by
# its time; it runs until the test ends it
/usr/bin/python3 - "$T/k1" 127.0.0.1:$port "$HERE" > "$T/flood.log" 2>&1 <<'EOF' &
import socket, sys, time
keyfile, dst, here = sys.argv[1:4]
sys.path.insert(0, here + "/relay")
sys.path.insert(0, here)
from tap_peers import ctl
import authtool
kid, key = authtool.read_key(keyfile)
host, port = dst.split(":")
leave = ctl(2, 0, 0)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
sent = 0
def burst(n):
    global sent
    for _ in range(n):
        t_us = int(time.time() * 1e6) + 28_000_000 + sent
        s.sendto(authtool.seal(kid, key, leave, 0, t_us), (host, int(port)))
        sent += 1
for _ in range(80):  # more than the publisher remembers, paced to its socket
    burst(100)
    time.sleep(0.01)
print("flooding from port %d: %d LEAVEs stamped 28 s ahead" % (s.getsockname()[1], sent), flush=True)
while True:
    time.sleep(0.1)
    burst(20)
EOF
FLOOD=$!
PIDS="$FLOOD"
wait_line "flooding from port" "$T/flood.log" 600 || fail "the flooder did not start"

"$SHIM" --buffer "$SHM.a" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 1)) --key "$T/k1" --exit-after 150 > "$T/shim.log" 2>&1 &
PIDS="$PIDS $!"

wait_line "subscriber 127.0.0.1:$((port + 1)) joined" "$T/publish.log" 1200 ||
	fail "the honest shim's JOINs were refused during the flood"
wait_line "committed version 1 -> 2" "$T/shim.log" 1200 ||
	fail "the honest shim did not commit version 2 during the flood"
grep -q "refused: future" "$T/publish.log" || fail "the flood was not refused as future"
kill "$FLOOD"
wait "$PUB" 2>/dev/null || fail "publisher"
PUB=""
check_buffers() { python3 "$HERE/check_buffers.py" "$@"; }
check_buffers "$T/traj/step-0002.safetensors" "$SHM.a" || fail "the shim's buffer is not bit-exact"
fut=$(sed -n 's/.*authentication: [0-9]* stale, \([0-9]*\) future.*/\1/p' "$T/publish.log" | tail -n 1)
[ "${fut:-0}" -ge 4200 ] || fail "the publisher counted ${fut:-none} future control messages"
grep -q "authentication: 0 stale" "$T/publish.log" || fail "future messages were counted as stale"
echo "ok - $fut signed LEAVEs stamped 28 s ahead refused as future; the honest shim joined and committed version 2 bit-exact meanwhile"
