#!/bin/sh
# run_binding_test.sh BFPATCH SHIM: signed frames are bound to the
# publisher run that sent them (docs/SECURITY.md "Runs").
#  1. A shim follows its publisher's run and commits version 1.
#  2. The frames of patch 1 -> 2, signed with the same key but bound to
#     another run (a capture of another run, or of this one before a
#     rollback), are sent to the shim: every one is refused and counted,
#     the buffer stays at version 1 (a shim that took them would commit 2).
#  3. The publisher restarts (a new run): the shim follows the new run
#     from its fresh, signed HEARTBEAT and commits version 2 bit-exactly.
#  4. The old run's control messages are refused by the new publisher.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup runbind
port=$((20000 + ($$ + 7) % 20000))
make_key 1 "$T/k"
"$BFP" synth -o "$T/traj" -p 2M -n 2 -S 11 2>/dev/null || fail synth
mkdir "$T/d01" && cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/d01/"

"$SHIM" --key "$T/k" --buffer "$SHM.a" --init "$T/traj/step-0000.safetensors" \
	--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 1)) --nack-ms 50 \
	--exit-after 60 > "$T/shim.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "listening on" "$T/shim.log" || fail "the shim did not start"
"$BFP" publish --key "$T/k" --dir "$T/d01" --listen 127.0.0.1:$port --wait-subscribers 1 \
	> "$T/publish1.log" 2>&1 &
PUB=$!
wait_line "committed version 0 -> 1" "$T/shim.log" 200 || fail "version 1 was not committed"
run1=$(sed -n 's/.*publisher run \([0-9a-f]*\)$/\1/p' "$T/publish1.log" | head -n 1)
[ -n "$run1" ] || fail "the publisher did not say its run"
grep -q "following publisher run $run1" "$T/shim.log" || fail "the shim did not follow run $run1"

# 2: patch 1 -> 2 as another run's frames (bfpatch pcap binds each capture
# to a run of its own), sent straight to the shim
"$BFP" diff -q "$T/traj/step-0001.safetensors" "$T/traj/step-0002.safetensors" -b 1 \
	-o "$T/p12" || fail diff
"$BFP" pcap "$T/p12" -o "$T/p12.pcap" --dst 127.0.0.1:$((port + 1)) --key "$T/k" || fail pcap
nf=$(python3 - "$HERE" "$T/p12.pcap" $((port + 1)) "$T/k" <<'PY'
import socket, sys, time
sys.path.insert(0, sys.argv[1] + "/relay")
sys.path.insert(0, sys.argv[1])
from pcaptool import read_pcap, udp_parts
import authtool
kid, key = authtool.read_key(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = 0
for p in read_pcap(sys.argv[2]):
    d = udp_parts(p)[4]
    assert authtool.open_(kid, key, d) is not None  # validly signed, other run
    s.sendto(d, ("127.0.0.1", int(sys.argv[3])))
    n += 1
    time.sleep(0.001)
print(n)
PY
) || fail "sending the other run's frames"
sleep 1
kill -USR1 $(echo $PIDS | cut -d' ' -f1)
wait_line "frames of another publisher run $nf," "$T/shim.log" 30 ||
	fail "the shim did not refuse all $nf frames of another run: $(grep 'another publisher run' "$T/shim.log" | tail -n 1)"
grep -q "committed version 1 -> 2" "$T/shim.log" && fail "frames of another run were committed"
python3 "$HERE/check_buffers.py" "$T/traj/step-0001.safetensors" "$SHM.a" >/dev/null ||
	fail "the buffer is not version 1"

# 3: the publisher restarts: a new run, announced by its HEARTBEATs
kill $PUB; wait $PUB 2>/dev/null
"$BFP" publish --key "$T/k" --dir "$T/d01" --listen 127.0.0.1:$port --resume \
	> "$T/publish2.log" 2>&1 &
PUB=$!
wait_line "publisher run" "$T/publish2.log" || fail "the new publisher did not start"
run2=$(sed -n 's/.*publisher run \([0-9a-f]*\)$/\1/p' "$T/publish2.log" | head -n 1)
[ "$run2" != "$run1" ] || fail "a restarted publisher kept its run"
wait_line "upstream announced publisher run $run2 (was $run1)" "$T/shim.log" 200 ||
	fail "the shim did not follow the new run"
cp "$T/traj/step-0002.safetensors" "$T/d01/.step-0002.tmp" &&
	mv "$T/d01/.step-0002.tmp" "$T/d01/step-0002.safetensors"
wait_line "committed version 1 -> 2" "$T/shim.log" 300 || fail "version 2 was not committed"
python3 "$HERE/check_buffers.py" "$T/traj/step-0002.safetensors" "$SHM.a" >/dev/null ||
	fail "version 2 is not bit-exact"

# 4: a NACK bound to the old run, signed and fresh, is refused by the new
# publisher (it is a capture, or a subscriber that has not heard of the
# new run: answered, it would get frames it then refuses)
python3 - "$HERE" "$T/k" $port "$run1" <<'PY' || fail "sending an old-run NACK"
import socket, sys, time
sys.path.insert(0, sys.argv[1] + "/relay")
sys.path.insert(0, sys.argv[1])
from tap_peers import ctl
import authtool
kid, key = authtool.read_key(sys.argv[2])
m = ctl(3, 0, 1, ranges=[(0, 3)])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(authtool.seal(kid, key, m, int(sys.argv[4], 16), int(time.time() * 1e6)),
         ("127.0.0.1", int(sys.argv[3])))
PY
wait_line "of publisher run $run1, not this one; refused" "$T/publish2.log" 30 ||
	fail "the new publisher took a control message of the old run"
echo "ok - $nf frames of another run refused, the buffer kept at version 1; the restarted publisher's run followed, version 2 bit-exact; an old-run NACK refused"
