#!/bin/sh
# bench_relay.sh [BUILD_DIR] [SECONDS]: bfpatch-relay's output rate at
# fan-out 1, 4 and 16 for 1500- and 8000-byte packets, next to dpdk-testpmd
# io forwarding on the same virtual devices in the same run, and the
# repair path (NACKs answered from the cache), and the rates of a relay
# that verifies each frame's signature (--key), and of one that also signs
# each output again under its subscriber's own key (--peer-keys, keys per
# hop); the other runs measure the
# relay without keys (--insecure: unsigned frames and NACKs from pcap
# files). One lcore each: the relay
# does RX, fan-out and TX on its main lcore; testpmd forwards on one lcore.
# Devices: port 0 replays a pcap of valid frames forever (net_pcap,
# infinite_rx), port 1 is net_null (TX discards).
set -eu
B=${1:-build}
SECS=${2:-4}
BFP=$B/cli/bfpatch
RELAY=$B/dpdk_app/bfpatch-relay
TESTPMD=$(command -v dpdk-testpmd || true)
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T" /var/run/dpdk/bfpbench$$*' EXIT
EAL="--no-huge -m 1024 --no-pci --log-level=lib.eal:error"
# the relay options for N static subscribers on port 1 (net_null)
subscribers() {
	i=1
	while [ $i -le "$1" ]; do
		printf ' --subscriber 198.18.1.%d:7500,mac=02:00:00:00:01:%02x,eth=1' $i $i
		i=$((i + 1))
	done
}

echo "bfpatch bench_relay: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $SECS s per run"
"$BFP" synth -o "$T/traj" -p 2M -n 0 -S 2 2>/dev/null

printf '%-6s %-7s %14s %12s %14s %10s %10s\n' bytes fanout "relay Mpps" "relay Gb/s" "testpmd Mpps" ratio copies
for size in 1500 8000; do
	# keyframes of the right size: Ethernet+IPv4+UDP (42) + frame = size
	"$BFP" diff -q -k -s $((size - 42)) "$T/traj/step-0000.safetensors" \
		"$T/traj/step-0000.safetensors" -o "$T/key$size"
	"$BFP" pcap "$T/key$size" -o "$T/in$size.pcap" --dst 198.18.0.1:7400
	mbuf=$((size + 1024))
	tp=""
	if [ -n "$TESTPMD" ]; then
		out=$( (sleep "$SECS"; echo) | "$TESTPMD" -l 0-1 $EAL --file-prefix bfpbench$$tp \
			--vdev=net_pcap0,rx_pcap="$T/in$size.pcap",infinite_rx=1 --vdev=net_null0 -- \
			--forward-mode=io --no-flush-rx --total-num-mbufs=8192 --mbuf-size=$mbuf \
			--max-pkt-len=9600 -a 2>&1 || true)
		tx=$(printf '%s\n' "$out" | awk '/Accumulated forward statistics/ {f=1} f && /TX-packets:/ {print $NF; exit}')
		[ -n "$tx" ] && tp=$(awk -v t="$tx" -v s="$SECS" 'BEGIN {printf "%.3f", t / s / 1e6}')
	fi
	for fan in 1 4 16; do
		subs=$(subscribers $fan)
		"$RELAY" -l 0 $EAL --file-prefix bfpbench$$r \
			--vdev=net_pcap0,rx_pcap="$T/in$size.pcap",infinite_rx=1 --vdev=net_null0 -- \
			--mbuf-size $mbuf --queue 256 --run-time "$SECS" --insecure $subs > "$T/relay.log" 2>&1
		fo=$(awk '$1 == "fanout_copies" {print $2}' "$T/relay.log")
		txp=$(awk '/^  subscriber/ {s += $4} END {print s + 0}' "$T/relay.log")
		awk -v p="$txp" -v s="$SECS" -v b="$size" -v tp="$tp" -v fan="$fan" -v fo="$fo" 'BEGIN {
			mpps = p / s / 1e6
			printf "%-6d %-7d %14.3f %12.2f %14s %10s %10s\n", b, fan, mpps, mpps * b * 8 / 1000,
				tp == "" ? "n/a" : tp, tp == "" ? "n/a" : sprintf("%.2fx", mpps / tp), fo }' |
			tee "$T/rate-$size-$fan"
	done
done

# a relay with --key checks every frame's tag (AES-GMAC, docs/SECURITY.md)
# before it relays it; with --peer-keys it also signs each output again
# under its subscriber's own key: the same packets' sizes, signed
echo
echo "with keys (each frame's tag verified on the lcore that received it; per hop: each"
echo "output also signed under its subscriber's key; same packet sizes, signed frames; with"
echo "2 lcores a worker receives and verifies, the main one fans out and signs):"
printf '%-6s %-7s %-8s %-7s %14s %12s %18s %10s\n' bytes fanout keys lcores "relay Mpps" \
	"relay Gb/s" "of 1-lcore unkeyed" drop_auth
(umask 077; echo "1 $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$T/key")
: > "$T/peers"
for i in $(seq 16); do
	echo "$((100 + i)) $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >> "$T/peers"
done
chmod 600 "$T/peers"
for size in 1500 8000; do
	"$BFP" diff -q -k -s $((size - 42 - 40)) "$T/traj/step-0000.safetensors" \
		"$T/traj/step-0000.safetensors" -o "$T/skey$size"
	"$BFP" pcap "$T/skey$size" -o "$T/sin$size.pcap" --dst 198.18.0.1:7400 --key "$T/key"
	mbuf=$((size + 1024))
	for run in "1 0 verify" "16 0 verify" "1 0 per-hop" "16 0 per-hop" "16 0-1 verify" \
		"16 0-1 per-hop"; do
		set -- $run
		fan=$1 lc=$2 mode=$3
		subs=$(subscribers $fan)
		kargs="--key $T/key"
		if [ "$mode" = per-hop ]; then
			kargs="$kargs --peer-keys $T/peers"
			subs=$(echo "$subs" | awk '{for (i = 1; i <= NF; i++) {
				if ($i != "--subscriber") $i = $i ",key=" (100 + ++n); printf "%s ", $i }}')
		fi
		"$RELAY" -l $lc $EAL --file-prefix bfpbench$$k \
			--vdev=net_pcap0,rx_pcap="$T/sin$size.pcap",infinite_rx=1 --vdev=net_null0 -- \
			--mbuf-size $mbuf --queue 256 --run-time "$SECS" $kargs $subs > "$T/relay.log" 2>&1
		txp=$(awk '/^  subscriber/ {s += $4} END {print s + 0}' "$T/relay.log")
		da=$(awk '$1 == "drop_auth" {print $2}' "$T/relay.log")
		plain=$(awk '{print $3}' "$T/rate-$size-$fan")
		awk -v p="$txp" -v s="$SECS" -v b="$size" -v fan="$fan" -v pl="$plain" -v da="$da" \
			-v mode="$mode" -v lcs="$([ "$lc" = 0 ] && echo 1 || echo 2)" 'BEGIN {
			mpps = p / s / 1e6
			printf "%-6d %-7d %-8s %-7s %14.3f %12.2f %18s %10s\n", b, fan, mode, lcs, mpps,
				mpps * b * 8 / 1000, (pl > 0 ? sprintf("%.2f", mpps / pl) : "n/a"),
				(da == "" ? "n/a" : da) }'
	done
done

# the fan-out method: header mbuf + clone (used) against a full payload copy
# per output, fan-out 16, same input
echo
printf '%-6s %18s %18s\n' bytes "clone ns/output" "copy ns/output"
for size in 1500 8000; do
	mbuf=$((size + 1024))
	subs=$(subscribers 16)
	res=""
	for mode in "" --copy-fanout; do
		"$RELAY" -l 0 $EAL --file-prefix bfpbench$$c \
			--vdev=net_pcap0,rx_pcap="$T/in$size.pcap",infinite_rx=1 --vdev=net_null0 -- \
			--mbuf-size $mbuf --queue 256 --run-time "$SECS" --insecure $mode $subs \
			> "$T/relay.log" 2>&1
		p=$(awk '/^  subscriber/ {s += $4} END {print s + 0}' "$T/relay.log")
		res="$res $(awk -v p="$p" -v s="$SECS" 'BEGIN {printf "%.1f", p ? s * 1e9 / p : 0}')"
	done
	printf '%-6d %18s %18s\n' $size $res
done
echo "(ns per output of the whole single-core relay loop: RX, checks, fan-out, pacing, TX)"

# repair path: a JOINed subscriber NACKs frames the relay holds, over and
# over (no per-subscriber NACK budget: this measures the path itself)
python3 "$HERE/nack_pcap.py" "$T/key1500" "$T/nack.pcap"
"$RELAY" -l 0 $EAL --file-prefix bfpbench$$n \
	--vdev=net_pcap0,rx_pcap="$T/nack.pcap",infinite_rx=1 --vdev=net_null0 -- \
	--queue 256 --nack-rate 0 --run-time "$SECS" --insecure > "$T/relay.log" 2>&1
awk -v s="$SECS" '$1 == "cache_hits" {h = $2} $1 == "nacks" {n = $2}
	END {printf "repair path: %.0f NACKs/s answered, %.3f M frames/s resent from the cache\n", n / s, h / s / 1e6}' "$T/relay.log"
echo "payload copies on the fan-out path: 0 (header mbuf + indirect clone per output, see dpdk_app/output.c)"
