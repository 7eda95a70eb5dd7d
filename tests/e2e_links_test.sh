#!/bin/sh
# e2e_links_test.sh BFPATCH SHIM RELAY: 10 steps from the trainer through
# the relay to 3 actors, each in its own network namespace, over links that
# the test shapes: actor 1 at 100 Mbit/s and actors 2-3 at 1 Gbit/s (tbf),
# actor 3 losing 1% of its datagrams at random (nftables numgen). After
# every step each actor's weight buffer is compared with the trainer's
# checkpoint by sha256 of the bytes. Every part holds a key. All namespaces
# are removed afterwards.
set -u
BFP=$1
SHIM=$2
RELAY=$3
LOSS=${4:-1}   # percent of datagrams actor 3's link drops at random
HERE=$(cd "$(dirname "$0")" && pwd)
P=bfpl$$
. "$HERE/test_lib.sh"
test_setup links
test_teardown() {
	for n in "$P" "${P}a1" "${P}a2" "${P}a3"; do ip netns del "$n" 2>/dev/null; done
	rm -rf /var/run/dpdk/$P
}
[ "$(id -u)" = 0 ] && ip netns add "$P" 2>/dev/null || { echo "skip: needs root and ip netns"; exit 77; }
command -v nft >/dev/null || { echo "skip: needs nftables"; exit 77; }
X="ip netns exec $P"
. "$HERE/netns_lib.sh"
bridged_actors "$P" 3 bfpl || fail "network namespaces"
$X tc qdisc add dev bfpl1h root tbf rate 100mbit burst 64kb latency 200ms
$X tc qdisc add dev bfpl2h root tbf rate 1gbit burst 256kb latency 50ms
$X tc qdisc add dev bfpl3h root tbf rate 1gbit burst 256kb latency 50ms
ip netns exec "${P}a3" nft -f - <<EOF || fail "nftables"
table inet bfploss {
	chain in {
		type filter hook input priority 0;
		udp dport 7500 numgen random mod 100 < $LOSS counter drop
	}
}
EOF

"$BFP" synth -o "$T/traj" -p 2M -n 10 -S 21 2>/dev/null || fail synth
"$BFP" keygen "$T/key" 2>/dev/null || fail keygen
K="--key $T/key"
$X "$RELAY" --no-huge -m 1024 --no-pci --file-prefix "$P" -l 0 --log-level=lib.eal:error \
	--vdev=net_tap0,iface=bfplr0 -- --ip 0:198.18.0.1 --upstream 198.18.0.10:7401 \
	--cache-versions 4 $K > "$T/relay.log" 2>&1 &
PIDS="$PIDS $!"
for n in $(seq 100); do
	grep -q "checksums in" "$T/relay.log" 2>/dev/null && break
	sleep 0.2
done
$X ip link set bfplr0 address 02:00:00:00:ee:10 # the bridge must not own the relay's MAC
$X ip link set bfplr0 master br0
$X ip link set bfplr0 up
rates="100m 1g 1g"
for i in 1 2 3; do
	rate=$(echo $rates | cut -d' ' -f$i)
	ip netns exec "${P}a$i" "$SHIM" --buffer "$SHM.$i" --init "$T/traj/step-0000.safetensors" \
		--upstream 198.18.0.1:7401 --listen 198.18.0.2$i:7500 --rate $rate --exit-after 300 \
		$K > "$T/shim$i.log" 2>&1 &
	PIDS="$PIDS $!"
done
mkdir "$T/live"
cp "$T/traj/step-0000.safetensors" "$T/live/"
sleep 2 # the shims JOIN the relay, the relay JOINs the publisher
$X "$BFP" publish $K --dir "$T/live" --listen 198.18.0.10:7401 --wait-subscribers 1 \
	--steps 10 --linger 3 > "$T/publish.log" 2>&1 &
PUB=$!
PIDS="$PIDS $PUB"
for k in $(seq 1 10); do
	cp "$T/traj/step-$(printf %04d $k).safetensors" "$T/live/"
	for i in 1 2 3; do
		for n in $(seq 300); do
			grep -q "committed version $((k - 1)) -> $k" "$T/shim$i.log" && break
			sleep 0.1
		done
	done
	python3 "$HERE/check_buffers.py" "$T/traj/step-$(printf %04d $k).safetensors" \
		"$SHM.1" "$SHM.2" "$SHM.3" || fail "step $k"
	echo "step $k: 3 actors committed, sha256 equal to the trainer's"
done
wait $PUB || fail publish
PIDS=$(echo $PIDS | tr ' ' '\n' | grep -vx "$PUB" | tr '\n' ' ')
for p in $PIDS; do kill -TERM "$p"; done
wait
PIDS=""
drops=$(ip netns exec "${P}a3" nft list table inet bfploss | grep -o 'packets [0-9]*' | head -1)
echo "actor 3's link dropped $drops; its shim sent $(grep -o 'NACKs [0-9]*' "$T/shim3.log")"
grep -E "cache_hits|nacks_forwarded" "$T/relay.log" | tr -s ' ' | tr '\n' ';'
echo
echo "ok - 10 steps to 3 actors over shaped links, $LOSS% random loss on one, bit-exact after every commit"
