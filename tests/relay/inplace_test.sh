#!/bin/sh
# inplace_test.sh BFPATCH RELAY [perhop] [twice] [fan2] [asis]: fan-out 1,
# where the relay sends a frame it stores in the frame's own mbuf, its
# headers in its headroom (dpdk_app/output.c), and the repair cache reads
# the frame after them: a patch goes through bfpatch-relay on net_pcap to
# one static subscriber A; then B JOINs and NACKs every frame, answered
# from the repair cache. A must get every frame as it came and B every
# frame from the cache, byte-identical with valid checksums
# (tests/relay/inplace.py): an output written over the cached frame (its
# headers, a trailer), or a cached frame read from its output's headers,
# would spoil B's. With twice every frame comes
# again after the first pass, a copy the cache holds, and A's output of
# it is the received mbuf itself (its headers, per hop its trailer,
# written in place): A must get each twice, B's still from the first
# copies. With fan2 a second static subscriber A2 takes every frame too
# (fan-out 2: A2's output of a repeated frame is the mbuf itself while
# A's clone of it may still be queued); with perhop too, A has no peer
# key (its frames go as signed upstream) and A2 has one: A2's trailer
# must then not be signed in place, over A's. With perhop the frames are
# signed, A and B have keys of their
# own (--peer-keys) and each output must be signed again under its
# subscriber's key and no other; with asis too A has none (its output is
# the stored frame's own mbuf, as unkeyed) and B's are signed again from
# the cached frame after A's headers.
set -u
BFP=$1
RELAY=$2
MODE="" TWICE="" FAN2="" SA2="" ASIS=""
for a in "${3:-}" "${4:-}" "${5:-}"; do
	case $a in
	perhop) MODE=perhop ;;
	twice) TWICE=--twice ;;
	fan2) FAN2=--fan2 ;;
	asis) ASIS=1 ;;
	esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T" /var/run/dpdk/bfpip$$' EXIT
fail() { echo "FAIL: $*"; [ -f "$T/relay.log" ] && cat "$T/relay.log"; exit 1; }

"$BFP" synth -o "$T/traj" -p 400k -n 1 -S 4 2>/dev/null || fail synth
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p" || fail diff
newkey() { (umask 077; echo "$1 $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$2"); }
if [ "$MODE" = perhop ]; then
	newkey 3 "$T/key"
	newkey 11 "$T/ka"
	newkey 12 "$T/kb"
	(umask 077; cat "$T/ka" "$T/kb" > "$T/peers")
	"$BFP" pcap "$T/p" -o "$T/frames.pcap" --dst 198.18.0.1:7400 --key "$T/key" || fail pcap
	# shellcheck disable=SC2086 # TWICE: an option or nothing
	python3 "$HERE/inplace.py" gen $TWICE "$T/frames.pcap" "$T/in.pcap" "$T/kb" || fail gen
	KA="--key $T/key --peer-keys $T/peers" SA=,key=11 CK="A=$T/ka B=$T/kb"
	[ -n "$FAN2" ] && SA="" SA2=,key=11 CK="A=$T/key A2=$T/ka B=$T/kb"
	[ -n "$ASIS" ] && SA="" CK="A=$T/key B=$T/kb"
else
	"$BFP" pcap "$T/p" -o "$T/frames.pcap" --dst 198.18.0.1:7400 || fail pcap
	# shellcheck disable=SC2086 # TWICE: an option or nothing
	python3 "$HERE/inplace.py" gen $TWICE "$T/frames.pcap" "$T/in.pcap" || fail gen
	KA=--insecure SA="" CK=""
fi
nframes=$("$BFP" info --json "$T/p" | python3 -c 'import json, sys; print(json.load(sys.stdin)["frames"])')
# shellcheck disable=SC2086 # KA is a list of options
"$RELAY" --no-huge -m 1024 --no-pci --file-prefix bfpip$$ -l 0 --log-level=lib.eal:error \
	--vdev="net_pcap0,rx_pcap=$T/in.pcap,tx_pcap=$T/out.pcap" -- \
	--ip 0:198.18.0.1 --run-time 1.5 $KA \
	--subscriber 198.18.0.11:7500,mac=02:00:00:00:00:11$SA \
	${FAN2:+--subscriber 198.18.0.11:7502,mac=02:00:00:00:00:11${SA2:-$SA}} > "$T/relay.log" 2>&1 ||
	fail "relay exited with an error"
counter() { awk -v k="$1" '$1 == k {print $2}' "$T/relay.log"; }
[ "$(counter joins)" = 1 ] || fail "B's JOIN was not taken"
[ "$(counter cache_hits)" = "$nframes" ] ||
	fail "cache_hits $(counter cache_hits), B NACKed all $nframes frames"
[ "$(counter cache_stored)" = "$nframes" ] ||
	fail "cache_stored $(counter cache_stored), $nframes frames${TWICE:+ (each stored once)}"
# shellcheck disable=SC2086 # CK is a list of arguments, TWICE and FAN2 an option or nothing
python3 "$HERE/inplace.py" check $TWICE $FAN2 "$T/frames.pcap" "$T/out.pcap" $CK || fail "outputs"
echo "ok - fan-out $([ -n "$FAN2" ] && echo 2 || echo 1) in the frame's headroom${MODE:+ ($MODE)}${TWICE:+, and in the received mbuf}: $nframes frames to A${FAN2:+ and A2}${TWICE:+ twice}, and to B from the cache"
