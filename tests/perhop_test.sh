#!/bin/sh
# perhop_test.sh BFPATCH SHIM: keys per hop (docs/SECURITY.md). A
# publisher with --peer-keys holds one key per actor; each actor holds
# only its own.
#  - Actors A and B join under their own keys and commit versions 1 and 2
#    bit-exactly: what the publisher sends each is signed with that
#    actor's key.
#  - A compromised actor A (its key, the run, the real frames of version
#    2) signs those frames and sends them to actor B ahead of the
#    publisher: B refuses every one (unknown key) and still commits the
#    publisher's.
#  - Actor C, whose key is not in the table, is refused: it never joins.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup perhop
port=$((20000 + ($$ + 13) % 20000))
for k in 11 12 13; do make_key $k "$T/k$k"; done
(umask 077; cat "$T/k11" "$T/k12" > "$T/peers")
"$BFP" synth -o "$T/traj" -p 2M -n 2 -S 12 2>/dev/null || fail synth
mkdir "$T/d" && cp "$T/traj/step-0000.safetensors" "$T/d/"

# (wait_line's loop counts in $n: the loops here use $sn)
for s in a:11:1 b:12:2 c:13:3; do
	sn=${s%%:*} k=$(echo $s | cut -d: -f2) o=${s##*:}
	"$SHIM" --key "$T/k$k" --buffer "$SHM.$sn" --init "$T/traj/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + o)) --nack-ms 50 \
		--exit-after 60 > "$T/shim$sn.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_line "listening on" "$T/shim$sn.log" || fail "shim $sn did not start"
done
"$BFP" publish --peer-keys "$T/peers" --dir "$T/d" --listen 127.0.0.1:$port \
	--wait-subscribers 2 > "$T/publish.log" 2>&1 &
PUB=$!
wait_line "publisher run" "$T/publish.log" || fail "the publisher did not start"
run=$(sed -n 's/.*publisher run \([0-9a-f]*\)$/\1/p' "$T/publish.log" | head -n 1)
for sn in a b; do
	wait_line "following publisher run $run" "$T/shim$sn.log" 200 || fail "shim $sn did not join"
done
cp "$T/traj/step-0001.safetensors" "$T/d/.s1" && mv "$T/d/.s1" "$T/d/step-0001.safetensors"
for sn in a b; do
	wait_line "committed version 0 -> 1" "$T/shim$sn.log" 300 || fail "shim $sn did not commit 1"
done

# actor A forges: version 2's real frames, signed with A's key and bound to
# the publisher's run, sent to B before the publisher sends them
"$BFP" diff -q "$T/traj/step-0001.safetensors" "$T/traj/step-0002.safetensors" -b 1 \
	-o "$T/p12" || fail diff
nf=$(python3 - "$HERE" "$T/p12" "$T/k11" "$run" $((port + 2)) <<'PY'
import socket, sys, time
sys.path.insert(0, sys.argv[1] + "/relay")
sys.path.insert(0, sys.argv[1])
from tap_peers import frames
import authtool
kid, key = authtool.read_key(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fr = frames(sys.argv[2])
for f in fr:
    s.sendto(authtool.seal(kid, key, f, int(sys.argv[4], 16)), ("127.0.0.1", int(sys.argv[5])))
    time.sleep(0.001)
print(len(fr))
PY
) || fail "forging"
sleep 0.5
grep -q "committed version 1 -> 2" "$T/shimb.log" && fail "actor B committed frames actor A signed"
grep -q "frame refused: unknown key" "$T/shimb.log" || fail "actor B did not refuse A's frames"
cp "$T/traj/step-0002.safetensors" "$T/d/.s2" && mv "$T/d/.s2" "$T/d/step-0002.safetensors"
for sn in a b; do
	wait_line "committed version 1 -> 2" "$T/shim$sn.log" 300 || fail "shim $sn did not commit 2"
	python3 "$HERE/check_buffers.py" "$T/traj/step-0002.safetensors" "$SHM.$sn" >/dev/null ||
		fail "shim $sn's buffer is not version 2"
done
kill -USR1 $(echo $PIDS | cut -d' ' -f2)
wait_line "refused by authentication $nf," "$T/shimb.log" 30 ||
	fail "B did not count the $nf forged frames: $(grep 'refused by authentication' "$T/shimb.log" | tail -n 1)"
grep -q "127.0.0.1:$((port + 3)) joined" "$T/publish.log" && fail "actor C, not in the table, joined"
grep -q "refused: unknown key" "$T/publish.log" || fail "actor C's JOINs were not refused"
echo "ok - actors A and B each under their own key, version 2 bit-exact; $nf frames A signed refused by B; C not in the table refused"
