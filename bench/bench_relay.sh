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
# Then fan-out 16 on two fan-out lcores (--fanout-lcores 2) against one,
# unkeyed and per hop.
# Devices: port 0 replays a pcap of valid frames forever (net_pcap,
# infinite_rx), port 1 is net_null (TX discards; no-rx=1: it receives
# nothing, so testpmd forwards port 0's frames only, one way, and the
# relay polls no packets but those).
# Beside them, DPDK's ipv4_multicast example (dpdk-doc), built here with
# pkg-config libdpdk, forwards the same packets readdressed to a multicast
# group (mcast_pcap.py) to 1, 4 or 16 ports (port 0 as above, ports 1-15
# net_null with no-rx=1), one lcore, clone or refcount fan-out as it
# chooses. In the first table the three are measured alike: TX packets
# from ethdev telemetry over SECONDS, once they send and after a second of
# warm-up, and the CPU time each process took meanwhile: "ns" columns are
# CPU nanoseconds per packet out, and their ratios what the three would
# reach each with a CPU to itself (on a shared machine the packets per
# second also show how much CPU each got). Its adaptations (sed): the group table (fan-out 1:
# port 1, 4: ports 1-4, 16: ports 0-15), the mbuf data room the relay
# gets, no MULTI_SEGS TX offload (these vdevs have none) and 17 RX queues
# an lcore (it polls every port it sends on).
# FANOUTS="1" (default "1 4 16") limits the first table's fan-outs, and
# QUICK=1 stops after the second (every frame stored), LCORES=1 prints the
# fan-out lcores table alone: to compare builds in interleaved rounds.
set -eu
B=${1:-build}
FANOUTS=${FANOUTS:-1 4 16}
LCORES=${LCORES:-0}
[ "$LCORES" = 1 ] && FANOUTS=""
SECS=${2:-4}
BFP=${BFP:-$B/cli/bfpatch} # the frames' maker: BFP=PATH to compare builds on the same frames
RELAY=$B/dpdk_app/bfpatch-relay
TESTPMD=$(command -v dpdk-testpmd || true)
command -v dpdk-telemetry.py > /dev/null || { echo "bench_relay.sh: needs dpdk-telemetry.py (package dpdk)" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T" /var/run/dpdk/bfpbench$$*' EXIT
EAL="--no-huge -m 1024 --no-pci --log-level=lib.eal:error"
CLK_TCK=$(getconf CLK_TCK)
# the relay options for N static subscribers on port 1 (net_null)
subscribers() {
	i=1
	while [ $i -le "$1" ]; do
		printf ' --subscriber 198.18.1.%d:7500,mac=02:00:00:00:01:%02x,eth=1' $i $i
		i=$((i + 1))
	done
}

# ipv4_multicast, built into $T/mc-MBUF for a data room of MBUF bytes, or
# nothing where dpdk-doc or a compiler is missing
MCSRC=/usr/share/dpdk/examples/ipv4_multicast/main.c
mcast_build() {
	[ -f "$MCSRC" ] && command -v cc > /dev/null && command -v dpdk-telemetry.py > /dev/null ||
		return 1
	[ -x "$T/mc-$1" ] && return 0
	sed -e 's/^#define[[:space:]]*PKT_MBUF_DATA_SIZE.*/#define PKT_MBUF_DATA_SIZE (BENCH_MBUF + RTE_PKTMBUF_HEADROOM)/' \
		-e 's/\.offloads = RTE_ETH_TX_OFFLOAD_MULTI_SEGS,/.offloads = 0,/' \
		-e 's/^#define MAX_RX_QUEUE_PER_LCORE 16/#define MAX_RX_QUEUE_PER_LCORE 32/' \
		-e '/{RTE_IPV4(224,0,0,10[2-9]), 0x/d' -e '/{RTE_IPV4(224,0,0,11[0-5]), 0x/d' \
		-e 's/{RTE_IPV4(224,0,0,101), 0x1},/{RTE_IPV4(224,0,0,1), 0x0002}, {RTE_IPV4(224,0,0,4), 0x001E}, {RTE_IPV4(224,0,0,16), 0xFFFF},/' \
		"$MCSRC" > "$T/mc.c"
	# shellcheck disable=SC2046 # pkg-config prints lists of options
	cc -O3 -DBENCH_MBUF="$1" $(pkg-config --cflags libdpdk) "$T/mc.c" -o "$T/mc-$1" \
		$(pkg-config --libs libdpdk) 2> "$T/mc.err"
}
# the TX packets of every port of the process with file prefix $1
port_tx() {
	for p in $(seq 0 15); do echo "/ethdev/stats,$p"; done |
		dpdk-telemetry.py -f "$1" 2> /dev/null | python3 -c '
import json, sys
print(sum(v.get("opackets", 0) for l in sys.stdin if l.startswith("{")
          for v in json.loads(l).values() if isinstance(v, dict)))'
}
# The packets per second DPDK process $1 (file prefix $2) sends, read from
# ethdev telemetry over SECS once it sends and after a second of warm-up
# (EAL start-up takes seconds on a loaded machine: not counted), and the
# nanoseconds of CPU time (/proc/PID/stat, all its threads) it took per
# packet over the same interval, which other work on the machine taking
# turns on its CPU does not inflate; then ends it.
port_rate() {
	for _ in $(seq 100); do
		[ "$(port_tx "$2")" -gt 0 ] 2> /dev/null && break
		kill -0 "$1" 2> /dev/null || break
		sleep 0.1
	done
	sleep 1
	t1=$(date +%s.%N) c1=$(awk '{print $14 + $15}' "/proc/$1/stat") a=$(port_tx "$2")
	sleep "$SECS"
	t2=$(date +%s.%N) c2=$(awk '{print $14 + $15}' "/proc/$1/stat") b=$(port_tx "$2")
	kill "$1" 2> /dev/null
	wait "$1" 2> /dev/null || true
	awk -v a="$a" -v b="$b" -v t1="$t1" -v t2="$t2" -v c1="$c1" -v c2="$c2" -v hz="$CLK_TCK" \
		'BEGIN {if (b > a) printf "%.0f %.1f", (b - a) / (t2 - t1), (c2 - c1) / hz * 1e9 / (b - a)}'
}
# ipv4_multicast's outputs per second: MBUF-byte data room, PCAP, fan-out
mcast_rate() {
	V="--vdev=net_pcap0,rx_pcap=$2,infinite_rx=1"
	for i in $(seq 15); do V="$V --vdev=net_null$i,no-rx=1"; done
	# shellcheck disable=SC2086 # EAL and V are lists of options
	"$T/mc-$1" -l 0 $EAL --file-prefix bfpbench$$m $V -- -p FFFF -q 16 > "$T/mc.log" 2>&1 &
	port_rate $! bfpbench$$m
}
# testpmd's io forwarding, port 0 to port 1, in packets per second: MBUF,
# PCAP (its forwarding lcore is lcore 1; --stats-period: no prompt)
testpmd_rate() {
	# shellcheck disable=SC2086 # EAL is a list of options
	"$TESTPMD" -l 0-1 $EAL --file-prefix bfpbench$$tp \
		--vdev=net_pcap0,rx_pcap="$2",infinite_rx=1 --vdev=net_null0,no-rx=1 -- \
		--forward-mode=io --no-flush-rx --total-num-mbufs=8192 --mbuf-size="$1" \
		--max-pkt-len=9600 --stats-period 1 > "$T/testpmd.log" 2>&1 &
	port_rate $! bfpbench$$tp
}

echo "bfpatch bench_relay: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $SECS s per run"
"$BFP" synth -o "$T/traj" -p 2M -n 0 -S 2 2>/dev/null

[ "$LCORES" = 1 ] ||
	printf '%-6s %-7s %11s %11s %13s %8s %9s %9s %9s %9s %9s\n' bytes fanout "relay Mpps" \
		"relay Gb/s" "testpmd Mpps" ratio "relay ns" "mcast ns" "tpmd ns" "relay/mc" copies
# the relay at fan-out $2 on $1-byte frames of $3 (more relay options
# after): port_rate's two figures, and its outputs in all after them
relay_rate() {
	size=$1 fan=$2 pcap=$3
	shift 3
	subs=$(subscribers "$fan")
	# shellcheck disable=SC2086 # EAL and subs are lists of options
	"$RELAY" -l 0 $EAL --file-prefix bfpbench$$r \
		--vdev=net_pcap0,rx_pcap="$pcap",infinite_rx=1 --vdev=net_null0,no-rx=1 -- \
		--mbuf-size $((size + 1024)) --queue 256 --insecure "$@" $subs > "$T/relay.log" 2>&1 &
	port_rate $! bfpbench$$r > "$T/rate" # here, so that it waits for the relay's exit
	printf '%s %s\n' "$(cat "$T/rate")" "$(awk '$1 == "fanout_copies" {print $2}' "$T/relay.log")"
}
for size in 1500 8000; do
	# keyframes of the right size: Ethernet+IPv4+UDP (42) + frame = size
	# (raw values fill every frame to it)
	"$BFP" diff -q -k --key-encoding raw -s $((size - 42)) "$T/traj/step-0000.safetensors" \
		"$T/traj/step-0000.safetensors" -o "$T/key$size"
	"$BFP" pcap "$T/key$size" -o "$T/in$size.pcap" --dst 198.18.0.1:7400 2> /dev/null
	mbuf=$((size + 1024))
	tp=""
	if [ -n "$TESTPMD" ] && [ "$LCORES" != 1 ]; then
		tp=$(testpmd_rate $mbuf "$T/in$size.pcap")
	fi
	echo "$tp" > "$T/tp-$size"
	mc=""
	[ "$LCORES" != 1 ] && mcast_build $mbuf && mc=$mbuf
	for fan in $FANOUTS; do
		mns=""
		if [ -n "$mc" ]; then
			python3 "$HERE/mcast_pcap.py" "$T/in$size.pcap" "$T/mc.pcap" 224.0.0.$fan
			mns=$(mcast_rate $mc "$T/mc.pcap" $fan | awk '{print $2}')
		fi
		relay_rate $size $fan "$T/in$size.pcap" |
			awk -v b="$size" -v fan="$fan" -v tp="$tp" -v mns="$mns" '{
			mpps = $1 / 1e6
			split(tp, t, " ")
			printf "%-6d %-7d %11.3f %11.2f %13s %8s %9.1f %9s %9s %9s %9s\n", b, fan, mpps,
				mpps * b * 8 / 1000, tp == "" ? "n/a" : sprintf("%.3f", t[1] / 1e6),
				tp == "" ? "n/a" : sprintf("%.2fx", t[2] / $2), $2,
				mns == "" ? "n/a" : mns, tp == "" ? "n/a" : t[2],
				mns == "" ? "n/a" : sprintf("%.2fx", $2 / mns), $3 }' |
			tee "$T/rate-$size-$fan"
		echo "$mns" > "$T/mns-$size-$fan"
	done
done
# The rows above replay a pcap whose frames the repair cache keeps from
# their first pass: every later copy is found there and not stored again.
# A relay in service stores every frame and, its cache full, evicts the
# oldest for it: that path at fan-out 1, with the cache held to 1 MiB so
# that every frame replayed has left it before it comes round again.
if [ "$LCORES" != 1 ]; then
	echo
	echo "fan-out 1, every frame stored (repair cache of 1 MiB, full: each frame evicts the oldest):"
	printf '%-6s %11s %9s %9s %8s %9s %9s %13s\n' bytes "relay Mpps" "relay ns" "tpmd ns" ratio \
		"mcast ns" "relay/mc" "cache_stored"
fi
for size in $([ "$LCORES" = 1 ] || echo 1500 8000); do
	rr=$(relay_rate "$size" 1 "$T/in$size.pcap" --cache-bytes 1m)
	cs=$(awk '$1 == "cache_stored" {print $2}' "$T/relay.log")
	echo "$rr" | awk -v b="$size" -v mns="$(cat "$T/mns-$size-1")" -v cs="$cs" \
		-v tp="$(cat "$T/tp-$size")" '{
		split(tp, t, " ")
		printf "%-6d %11.3f %9.1f %9s %8s %9s %9s %13s\n", b, $1 / 1e6, $2,
			tp == "" ? "n/a" : t[2], tp == "" ? "n/a" : sprintf("%.2fx", t[2] / $2),
			mns == "" ? "n/a" : mns, mns == "" ? "n/a" : sprintf("%.2fx", $2 / mns), cs }'
done

[ "${QUICK:-0}" = 1 ] && exit 0

# a relay with --key checks every frame's tag (AES-GMAC, docs/SECURITY.md)
# before it relays it; with --peer-keys it also signs each output again
# under its subscriber's own key: the same packets' sizes, signed
if [ "$LCORES" != 1 ]; then
	echo
	echo "with keys (each frame's tag verified on the lcore that received it; per hop: each"
	echo "output also signed under its subscriber's key; same packet sizes, signed frames; with"
	echo "2 lcores a worker receives and verifies, the main one fans out and signs):"
	printf '%-6s %-7s %-8s %-7s %14s %12s %18s %10s\n' bytes fanout keys lcores "relay Mpps" \
		"relay Gb/s" "of 1-lcore unkeyed" drop_auth
fi
(umask 077; echo "1 $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$T/key")
: > "$T/peers"
for i in $(seq 16); do
	echo "$((100 + i)) $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >> "$T/peers"
done
chmod 600 "$T/peers"
for size in 1500 8000; do
	"$BFP" diff -q -k --key-encoding raw -s $((size - 42 - 40)) "$T/traj/step-0000.safetensors" \
		"$T/traj/step-0000.safetensors" -o "$T/skey$size"
	"$BFP" pcap "$T/skey$size" -o "$T/sin$size.pcap" --dst 198.18.0.1:7400 --key "$T/key" 2> /dev/null
	mbuf=$((size + 1024))
	for run in "1 0 verify" "16 0 verify" "1 0 per-hop" "16 0 per-hop" "1 0-1 verify" "16 0-1 verify" \
		"16 0-1 per-hop"; do
		[ "$LCORES" = 1 ] && continue
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
			--vdev=net_pcap0,rx_pcap="$T/sin$size.pcap",infinite_rx=1 --vdev=net_null0,no-rx=1 -- \
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

# fan-out on several lcores (--fanout-lcores): fan-out 16 on one lcore
# (RX, fan-out, TX), on two with 1 fan-out lcore (a worker receives, the
# main lcore fans out to all 16), and on two fan-out lcores (the main
# lcore receives and fans out to 8 subscribers, lcore 1 to the other 8, each
# on its own TX queue of net_null); unkeyed and per hop. The three are
# interleaved, ROUNDS times (default 3), and the best of each is shown:
# other work on the machine only ever slows a run down.
ROUNDS=${ROUNDS:-3}
fan_rate() { # SIZE MODE LCORES FANOUT_LCORES: outputs per second
	subs=$(subscribers 16)
	if [ "$2" = per-hop ]; then
		kargs="--key $T/key --peer-keys $T/peers" pc="$T/sin$1.pcap"
		subs=$(echo "$subs" | awk '{for (i = 1; i <= NF; i++) {
			if ($i != "--subscriber") $i = $i ",key=" (100 + ++n); printf "%s ", $i }}')
	else
		kargs="--insecure" pc="$T/in$1.pcap"
	fi
	"$RELAY" -l "$3" $EAL --file-prefix bfpbench$$f \
		--vdev=net_pcap0,rx_pcap="$pc",infinite_rx=1 --vdev=net_null0,no-rx=1 -- \
		--mbuf-size $(($1 + 1024)) --queue 256 --run-time "$SECS" --fanout-lcores "$4" \
		$kargs $subs > "$T/relay.log" 2>&1
	awk -v s="$SECS" '/^  subscriber/ {p += $4} END {printf "%.0f", p / s}' "$T/relay.log"
}
echo
echo "fan-out lcores (fan-out 16; per hop: each output signed under its subscriber's key;"
echo "best of $ROUNDS interleaved runs):"
printf '%-6s %-8s %-7s %-8s %11s %18s %11s %13s\n' bytes keys lcores fan-out "relay Mpps" \
	"Mpps/fan-out lcore" "of 1 lcore" "of 1 fan-out"
for size in 1500 8000; do
	for mode in none per-hop; do
		: > "$T/fan"
		for _ in $(seq "$ROUNDS"); do
			for cfg in "0 1" "0-1 1" "0-1 2"; do
				set -- $cfg
				echo "$1 $2 $(fan_rate $size $mode $1 $2)" >> "$T/fan"
			done
		done
		awk -v b=$size -v mode=$mode '{k = $1 " " $2; if ($3 > best[k]) best[k] = $3}
			END {
			one = best["0 1"]; two = best["0-1 1"]
			n = split("0 1,0-1 1,0-1 2", cf, ",")
			for (i = 1; i <= n; i++) {
				split(cf[i], c, " "); v = best[cf[i]]
				lcs = (c[1] == "0") ? 1 : 2
				r1 = (one > 0) ? sprintf("%.2fx", v / one) : "n/a"
				r2 = (two > 0) ? sprintf("%.2fx", v / two) : "n/a"
				printf "%-6d %-8s %-7d %-8d %11.3f %18.3f %11s %13s\n", b, mode,
					lcs, c[2], v / 1e6, v / 1e6 / c[2], r1, r2 } }' "$T/fan"
	done
done
[ "$LCORES" = 1 ] && exit 0

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
			--vdev=net_pcap0,rx_pcap="$T/in$size.pcap",infinite_rx=1 --vdev=net_null0,no-rx=1 -- \
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
	--vdev=net_pcap0,rx_pcap="$T/nack.pcap",infinite_rx=1 --vdev=net_null0,no-rx=1 -- \
	--queue 256 --nack-rate 0 --run-time "$SECS" --insecure > "$T/relay.log" 2>&1
awk -v s="$SECS" '$1 == "cache_hits" {h = $2} $1 == "nacks" {n = $2}
	END {printf "repair path: %.0f NACKs/s answered, %.3f M frames/s resent from the cache\n", n / s, h / s / 1e6}' "$T/relay.log"
echo "payload copies on the fan-out path: 0 (each output a header mbuf + indirect clone, or the input mbuf itself; see dpdk_app/output.c)"
