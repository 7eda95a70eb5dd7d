#!/bin/sh
# tree_test.sh BFPATCH RELAY: a two-level relay tree in a network namespace
# this test creates. Relay A and relay B each own a net_tap port; both taps
# and the kernel peers share a bridge. B subscribes to A (--upstream).
# Frames of patch 1 reach A before B exists, so receivers of B can get
# them only by NACKs that B forwards to A; patch 2 then flows A -> B ->
# receivers by itself. The peers' datagrams are unsigned (Python), so the
# relays run --insecure. Everything is removed afterwards, also on failure.
set -u
BFP=$1
RELAY=$2
HERE=$(cd "$(dirname "$0")" && pwd)
NS=bfptree$$
T=$(mktemp -d)
APID="" BPID=""
cleanup() {
	for p in $APID $BPID; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	ip netns del "$NS" 2>/dev/null
	rm -rf "$T" /var/run/dpdk/${NS}a /var/run/dpdk/${NS}b
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
	echo "FAIL: $*"
	for p in $APID $BPID; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	APID="" BPID=""
	for f in "$T"/relay_*.log; do [ -f "$f" ] && { echo "== $f"; grep -vE " 0$" "$f"; }; done
	exit 1
}

[ "$(id -u)" = 0 ] && ip netns add "$NS" 2>/dev/null || { echo "skip: needs root and ip netns"; exit 77; }
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" ip link add br0 type bridge
ip netns exec "$NS" ip addr add 198.18.0.10/24 dev br0
ip netns exec "$NS" ip addr add 198.18.0.11/24 dev br0
ip netns exec "$NS" ip addr add 198.18.0.12/24 dev br0
ip netns exec "$NS" ip link set br0 up

"$BFP" synth -o "$T/traj" -p 1M -n 2 -S 6 2>/dev/null || fail synth
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p1" || fail diff
"$BFP" diff -q -b 1 "$T/traj/step-0001.safetensors" "$T/traj/step-0002.safetensors" -o "$T/p2" || fail diff

start_relay() { # name iface ip [options]
	name=$1 ifc=$2 ip=$3
	shift 3
	ip netns exec "$NS" "$RELAY" --no-huge -m 512 --no-pci --file-prefix "$NS$name" -l 0 \
		--log-level=lib.eal:error --vdev=net_tap$name,iface=$ifc -- \
		--ip 0:$ip --heartbeat-timeout 60 --insecure "$@" > "$T/relay_$name.log" 2>&1 &
	pid=$!
	for i in $(seq 100); do # until the port has started
		grep -q "checksums in" "$T/relay_$name.log" 2>/dev/null && break
		sleep 0.2
	done
	# the kernel side of a tap starts with the DPDK port's MAC; a bridge
	# would take frames to that MAC as its own, so give the kernel side
	# another one (DPDK keeps the MAC it read at start)
	ip netns exec "$NS" ip link set "$ifc" address 02:00:00:00:ee:0$(printf %x $((0x$(printf %x "'$name") % 16)))
	ip netns exec "$NS" ip link set "$ifc" master br0 || fail "no $ifc"
	ip netns exec "$NS" ip link set "$ifc" up
}

start_relay a bfpa0 198.18.0.1
APID=$pid
sleep 1
ip netns exec "$NS" sh -c "cd '$HERE' && python3 tree_peers.py send '$T/p1' 198.18.0.1" || fail "send"
start_relay b bfpb0 198.18.0.2 --upstream 198.18.0.1:7401
BPID=$pid
sleep 3 # B resolves A with ARP and JOINs it (once a second)
ip netns exec "$NS" sh -c "cd '$HERE' && python3 tree_peers.py receive '$T/p1' '$T/p2' 198.18.0.2 198.18.0.1" ||
	fail "receivers"
kill -TERM "$APID" "$BPID"
wait "$APID" "$BPID"
APID="" BPID=""
fwd=$(awk '$1 == "nacks_forwarded" {print $2}' "$T/relay_b.log")
hits=$(awk '$1 == "cache_hits" {print $2}' "$T/relay_a.log")
joins=$(awk '$1 == "joins" {print $2}' "$T/relay_a.log")
[ "${fwd:-0}" -gt 0 ] || fail "B forwarded no NACK upstream"
[ "${hits:-0}" -gt 0 ] || fail "A answered no repair"
echo "ok - B forwarded $fwd NACK(s); A answered $hits frames from its cache; A saw $joins JOIN(s) from B"
