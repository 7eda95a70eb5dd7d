#!/bin/sh
# tap_test.sh BFPATCH RELAY [tap|af_packet]: bfpatch-relay on a net_tap
# port (or net_af_packet on one end of a veth pair) inside a network
# namespace this test creates; kernel UDP sockets on the kernel side (the
# tap itself, or the veth's other end) JOIN, send a patch's frames,
# receive them (3 receivers), and
# one receiver repairs deliberate losses with NACKs answered from the
# relay's cache. The peers' datagrams are unsigned (Python), so the relay
# runs --insecure. The namespace, devices and the relay are removed
# afterwards, also on failure. Skipped (exit 77) without root or netns.
set -u
BFP=$1
RELAY=$2
MODE=${3:-tap}
HERE=$(cd "$(dirname "$0")" && pwd)
NS=bfptap$$
T=$(mktemp -d)
RPID=""
cleanup() {
	[ -n "$RPID" ] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
	ip netns del "$NS" 2>/dev/null
	rm -rf "$T" /var/run/dpdk/$NS
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAIL: $*"; [ -f "$T/relay.log" ] && cat "$T/relay.log"; exit 1; }

[ "$(id -u)" = 0 ] && ip netns add "$NS" 2>/dev/null || { echo "skip: needs root and ip netns"; exit 77; }
ip netns exec "$NS" ip link set lo up

"$BFP" synth -o "$T/traj" -p 2M -n 1 -S 5 2>/dev/null || fail synth
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p" || fail diff

if [ "$MODE" = af_packet ]; then
	ip netns exec "$NS" ip link add bfpr0 type veth peer name bfpk0
	ip netns exec "$NS" ip link set bfpr0 up
	VDEV=net_af_packet0,iface=bfpr0,qpairs=1
	KIF=bfpk0
else
	VDEV=net_tap0,iface=bfptap0
	KIF=bfptap0
fi
ip netns exec "$NS" "$RELAY" --no-huge -m 1024 --no-pci --file-prefix "$NS" -l 0 \
	--log-level=lib.eal:error --vdev=$VDEV -- \
	--ip 0:198.18.0.1 --heartbeat-timeout 60 --insecure > "$T/relay.log" 2>&1 &
RPID=$!
for i in $(seq 100); do
	grep -q "checksums in" "$T/relay.log" 2>/dev/null && break
	sleep 0.2
done
ip netns exec "$NS" ip link show $KIF >/dev/null 2>&1 || fail "no $KIF interface"
for a in 10 11 12 13; do
	ip netns exec "$NS" ip addr add 198.18.0.$a/24 dev $KIF
done
ip netns exec "$NS" ip link set $KIF up
# a veth leaves UDP checksums to the "hardware" (CHECKSUM_PARTIAL): what
# af_packet reads on the peer would fail the relay's check, so the kernel
# side computes them itself
[ "$MODE" = af_packet ] && ip netns exec "$NS" ethtool -K $KIF tx off >/dev/null
sleep 1
ip netns exec "$NS" python3 "$HERE/tap_peers.py" "$T/p" 198.18.0.1 || fail "peers"
# counters are readable through DPDK telemetry while the relay runs
if command -v dpdk-telemetry.py >/dev/null; then
	printf '/bfpatch/stats\n/bfpatch/subscribers\n' | timeout 10 dpdk-telemetry.py -f "$NS" > "$T/tel" 2>&1
	python3 - "$T/tel" <<'PY' || fail "telemetry"
import json, sys
docs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
st = next(d["/bfpatch/stats"] for d in docs if "/bfpatch/stats" in d)
subs = next(d["/bfpatch/subscribers"] for d in docs if "/bfpatch/subscribers" in d)
assert st["cache_hits"] > 0 and st["fanout_copies"] > 0, st
assert st["joins"] == 3 and st["leaves"] == 3 and not subs, (st, subs)  # all LEFT
print("telemetry: cache_hits %d, fanout_copies %d, joins %d, leaves %d, subscribers now %d" %
      (st["cache_hits"], st["fanout_copies"], st["joins"], st["leaves"], len(subs)))
PY
fi
kill -TERM "$RPID"
wait "$RPID"
RPID=""
grep -E "checksums in|cache_hits|nacks |fanout|arp_request|joins|drop_" "$T/relay.log" | tr -s ' ' | tr '\n' ';'
echo
hits=$(awk '$1 == "cache_hits" {print $2}' "$T/relay.log")
[ "${hits:-0}" -gt 0 ] || fail "no repairs came from the cache"
echo "ok - repairs answered from the cache: $hits"
