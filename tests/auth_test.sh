#!/bin/sh
# auth_test.sh BFPATCH SHIM: authenticated frames end to end on loopback
# (docs/SECURITY.md). A shim holding key 1 first receives only hostile
# datagrams (tests/auth_inject.py: bit flips, truncations, unsigned frames,
# a wrong key, an unknown key id): every one is refused and counted and
# its buffer is untouched (sha256). The publisher then signs with key 1:
# that shim and one holding keys 1 and 2 follow bit-exactly, one holding a
# wrong key of the same id refuses everything. Stale and replayed control
# messages are refused by the publisher. Then a key rollover: the
# publisher signs with key 2; the shim holding both keys follows, the one
# holding key 1 only refuses. Buffers are compared by sha256.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup auth
"$SHIM" --help | grep -q -- "--key FILE" || { echo "skip: built without libsodium"; exit 77; }
port=$((20000 + ($$ + 31) % 20000))
umask 077
make_key 1 "$T/k1"
make_key 2 "$T/k2"
make_key 3 "$T/kx" # a key the publisher never signs with

"$BFP" synth -o "$T/traj" -p 1M -n 3 -S 17 2>/dev/null || fail synth
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p01" || fail diff
start_shim() { # name port keys...
	n=$1
	p=$2
	shift 2
	keys=""
	for k in "$@"; do keys="$keys --key $T/$k"; done
	"$SHIM" --buffer "$SHM.$n" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
		--listen 127.0.0.1:$p $keys --exit-after 60 >> "$T/shim$n.log" 2>&1 &
	PIDS="$PIDS $!"
}
start_shim a $((port + 1)) k1
start_shim b $((port + 2)) kx
start_shim c $((port + 3)) k1 k2
sleep 0.5
# hostile datagrams only, while nothing else is sent
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --key "$T/k1" --wait-subscribers 9 \
	--steps 1 --linger 0 > "$T/publish0.log" 2>&1 &
PUB0=$!
PIDS="$PIDS $PUB0" # stopped by cleanup too if the injector fails
sleep 0.5
/usr/bin/python3 "$HERE/auth_inject.py" "$T/p01" "$T/k1" 127.0.0.1:$((port + 1)) 127.0.0.1:$port \
	> "$T/inject.txt" 2>&1 || fail "injector"
cat "$T/inject.txt"
sleep 1
kill $PUB0; wait $PUB0 2>/dev/null
nframes=$(sed -n 's/.* \([0-9]*\) bit-flipped.*/\1/p' "$T/inject.txt")
python3 "$HERE/check_buffers.py" "$T/traj/step-0000.safetensors" "$SHM.a" >/dev/null ||
	fail "hostile datagrams changed the buffer"
kill -USR1 $(echo $PIDS | cut -d' ' -f1); sleep 0.3
refused=$(sed -n 's/.*refused by authentication \([0-9]*\).*/\1/p' "$T/shima.log" | tail -n 1)
[ "$refused" = $((5 * nframes)) ] || fail "shim a refused $refused of $((5 * nframes)) hostile frames"
grep -q "refused: stale" "$T/publish0.log" || fail "a stale control message was not refused"
grep -q "refused: replay" "$T/publish0.log" || fail "a replayed control message was not refused"
grep -q "127.0.0.1:9 joined" "$T/publish0.log" || fail "the fresh signed JOIN was not accepted"
grep -q "127.0.0.1:$((port + 2)) joined" "$T/publish0.log" &&
	fail "a JOIN signed with a key the publisher does not hold was accepted"

# signed with key 1: a and c follow, b (holding key 3 only) refuses
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --key "$T/k1" --key "$T/kx" \
	--wait-subscribers 3 --steps 2 --linger 2 > "$T/publish1.log" 2>&1 || fail "publish with key 1"
for n in $(seq 100); do grep -q "committed version 1 -> 2" "$T/shimc.log" && break; sleep 0.1; done
for n in $(seq 30); do grep -q "committed version 1 -> 2" "$T/shima.log" && break; sleep 0.1; done
python3 "$HERE/check_buffers.py" "$T/traj/step-0002.safetensors" "$SHM.a" "$SHM.c" ||
	fail "signed patches"
python3 "$HERE/check_buffers.py" "$T/traj/step-0000.safetensors" "$SHM.b" > /dev/null ||
	fail "the shim with the wrong key applied something"
# rollover: the publisher signs with key 2 (key 1 still verifies its JOINs)
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --key "$T/k2" --key "$T/k1" \
	--key "$T/kx" --wait-subscribers 3 --steps 3 --linger 2 > "$T/publish2.log" 2>&1 ||
	fail "publish with key 2"
for n in $(seq 100); do grep -q "committed version 2 -> 3" "$T/shimc.log" && break; sleep 0.1; done
for p in $PIDS; do kill -TERM "$p"; done
wait
PIDS=""
python3 "$HERE/check_buffers.py" "$T/traj/step-0003.safetensors" "$SHM.c" || fail "rollover"
# the rollover publisher started over at version 0: its patches 0 -> 1 and
# 1 -> 2 are old for shim c (at 2): validly signed, ignored and counted
grep -q "old [1-9]" "$T/shimc.log" || fail "replayed old versions were not counted as old"
python3 "$HERE/check_buffers.py" "$T/traj/step-0002.safetensors" "$SHM.a" > /dev/null ||
	fail "the shim without key 2 applied a version signed with it"
ra=$(sed -n 's/.*refused by authentication \([0-9]*\).*/\1/p' "$T/shima.log" | tail -n 1)
rb=$(sed -n 's/.*refused by authentication \([0-9]*\).*/\1/p' "$T/shimb.log" | tail -n 1)
[ "$rb" -gt 0 ] && [ "$ra" -gt "$refused" ] || fail "refusals not counted (a $ra, b $rb)"
echo "ok - signed frames: $((5 * nframes)) hostile datagrams refused and counted with nothing applied; stale and replayed control refused; a shim without the signing key refused $rb; rollover to key 2 followed by the two-key shim, refused by the key-1 shim"
