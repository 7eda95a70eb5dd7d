#!/bin/sh
# e2e_relay_test.sh BFPATCH SHIM RELAY: trainer -> relay -> actors in a
# network namespace this test creates. bfpatch-relay runs on a net_tap port
# and subscribes to the publisher (--upstream); 3 bfpatch-shim daemons
# subscribe to the relay; one of them loses a frame on purpose and its
# NACK is answered from the relay's cache. After 3 published steps every
# weight buffer must equal the trainer's checkpoint (sha256 of the bytes).
set -u
BFP=$1
SHIM=$2
RELAY=$3
AUTH=${4:-}   # "auth": every process holds a key; hostile datagrams at the relay
HERE=$(cd "$(dirname "$0")" && pwd)
NS=bfpe2e$$
. "$HERE/test_lib.sh"
test_setup e2e
FAIL_LINES=1000
test_teardown() {
	ip netns del "$NS" 2>/dev/null
	rm -rf /var/run/dpdk/$NS
}

[ "$(id -u)" = 0 ] && ip netns add "$NS" 2>/dev/null || { echo "skip: needs root and ip netns"; exit 77; }
ip netns exec "$NS" ip link set lo up
K="--insecure" # the keyless path, on purpose
if [ "$AUTH" = auth ]; then
	make_key 7 "$T/key"
	K="--key $T/key"
fi
"$BFP" synth -o "$T/traj" -p 2M -n 3 -S 12 2>/dev/null || fail synth

ip netns exec "$NS" "$RELAY" --no-huge -m 1024 --no-pci --file-prefix "$NS" -l 0 \
	--log-level=lib.eal:error --vdev=net_tap0,iface=bfpe0 -- \
	--ip 0:198.18.0.1 --upstream 198.18.0.10:7401 --cache-versions 4 $K > "$T/relay.log" 2>&1 &
PIDS="$PIDS $!"
for i in $(seq 100); do
	grep -q "checksums in" "$T/relay.log" 2>/dev/null && break
	sleep 0.2
done
for a in 10 11 12 13; do
	ip netns exec "$NS" ip addr add 198.18.0.$a/24 dev bfpe0 || fail "addresses"
done
ip netns exec "$NS" ip link set bfpe0 up
for i in 1 2 3; do
	drop=""
	[ $i = 2 ] && drop="--drop-every 7"
	ip netns exec "$NS" "$SHIM" --buffer "$SHM.$i" --init "$T/traj/step-0000.safetensors" \
		--upstream 198.18.0.1:7401 --listen 198.18.0.1$i:7500 --exit-after 60 $drop $K \
		> "$T/shim$i.log" 2>&1 &
	PIDS="$PIDS $!"
done
sleep 2 # the shims JOIN the relay
if [ "$AUTH" = auth ]; then # forged, tampered, truncated frames and stale/replayed control
	"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p01"
	ip netns exec "$NS" /usr/bin/python3 "$HERE/auth_inject.py" "$T/p01" "$T/key" \
		198.18.0.1:7400 198.18.0.1:7401 > "$T/inject.txt" 2>&1 || fail "injector"
fi
ip netns exec "$NS" "$BFP" publish --dir "$T/traj" --listen 198.18.0.10:7401 $K \
	--wait-subscribers 1 --steps 3 --linger 3 > "$T/publish.log" 2>&1 || fail publish
for i in 1 2 3; do
	for n in $(seq 150); do
		grep -q "committed version 2 -> 3" "$T/shim$i.log" && break
		sleep 0.1
	done
done
for p in $PIDS; do kill -TERM "$p"; done
wait
PIDS=""
python3 "$HERE/check_buffers.py" "$T/traj/step-0003.safetensors" "$SHM.1" "$SHM.2" "$SHM.3" ||
	fail "buffers"
hits=$(awk '$1 == "cache_hits" {print $2}' "$T/relay.log")
[ "${hits:-0}" -gt 0 ] || fail "no repair came from the relay's cache"
grep "sent .* frames" "$T/publish.log" | sed 's/.*bfpatch publish: //'
if [ "$AUTH" = auth ]; then
	nf=$(sed -n 's/.* \([0-9]*\) bit-flipped.*/\1/p' "$T/inject.txt")
	da=$(awk '$1 == "drop_auth" {print $2}' "$T/relay.log")
	# 5 damaged forms per frame; truncations that no longer parse as a
	# frame are dropped earlier (drop_frame); 2 stale + 1 replayed control
	bad=$(awk '$1 == "drop_frame" {print $2}' "$T/relay.log")
	# and none reached a shim (each would count it as refused)
	leaked=$(sed -n 's/.*refused by authentication \([0-9]*\).*/\1/p' "$T"/shim*.log |
		awk '{s += $1} END {print s + 0}')
	[ $((da + bad)) -ge $((5 * nf + 3)) ] && [ "$leaked" = 0 ] ||
		fail "hostile datagrams got through (drop_auth $da, drop_frame $bad, $nf frames, $leaked at shims)"
	cat "$T/inject.txt"
	echo "relay refused $da hostile datagrams by authentication, $bad as malformed"
fi
echo "ok - publish -> relay -> 3 shims bit-exact over 3 steps; $hits repair(s) from the relay's cache${AUTH:+; every frame and control message signed and verified}"
