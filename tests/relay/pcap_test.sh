#!/bin/sh
# pcap_test.sh BFPATCH RELAY: a synthetic patch, written by `bfpatch pcap`
# with malformed packets mixed in, goes through bfpatch-relay on net_pcap
# to 3 static subscribers; an independent reader checks the output pcap
# (every frame to every subscriber exactly once, byte-identical, valid
# checksums) and the relay's counters account for every malformed packet.
# LCORES (default 0): with 0-1, a worker lcore receives and classifies and
# the main lcore fans out; a map such as 0@0,1@1,2@1 (EAL --lcores) gives
# more workers than CPUs. EXTRA: more EAL options, e.g. a second port that
# allows more RX queues than net_pcap's one (every port gets as many as
# the one with the fewest allows). KEY: with "key", the frames are signed
# (bfpatch pcap --key) and copies with a flipped byte are mixed in too; the
# relay, holding the key, must relay every signed frame and count each
# tampered one as drop_auth (checked on whichever lcore received it).
# APPX: more relay options; with --fanout-lcores N the port gets N TX
# queues (a tx_pcap each, merged before the check) and every fan-out lcore
# must have made the outputs of the subscribers it owns, and only those.
set -u
BFP=$1
RELAY=$2
LCORES=${3:-0}
EXTRA=${4:-}
KEY=${5:-}
APPX=${6:-} # more relay options (after --)
case $LCORES in *@*) LC="--lcores=$LCORES" ;; *) LC="-l $LCORES" ;; esac
FAN=$(printf '%s\n' "$APPX" | sed -n 's/.*--fanout-lcores[ =]\([0-9]*\).*/\1/p')
FAN=${FAN:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T" /var/run/dpdk/bfprelay$$' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$BFP" synth -o "$T/traj" -p 400k -n 1 -S 9 2>/dev/null || fail synth
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p" || fail diff
ntamp=0 RK="" S1="" S2="" S3=""
if [ "$KEY" = key ] || [ "$KEY" = perhop ]; then
	(umask 077; echo "3 $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$T/key")
	"$BFP" pcap "$T/p" -o "$T/frames.pcap" --dst 198.18.0.1:7400 --key "$T/key" || fail pcap
	ntamp=$(python3 "$HERE/pcaptool.py" tamper "$T/frames.pcap" "$T/signed.pcap") || fail tamper
	# the same frames signed again, bound to another publisher run (each
	# pcap makes its own), after them: the relay follows the first run it
	# saw, so these are neither relayed nor cached (nor evict anything)
	"$BFP" pcap "$T/p" -o "$T/other.pcap" --dst 198.18.0.1:7400 --key "$T/key" || fail pcap
	nother=$(python3 - "$HERE" "$T/signed.pcap" "$T/other.pcap" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from pcaptool import read_pcap, write_pcap
a, b = read_pcap(sys.argv[2]), read_pcap(sys.argv[3])
write_pcap(sys.argv[2], a + b)
print(len(b))
PY
) || fail "other run"
	RK="--key $T/key"
	if [ "$KEY" = perhop ]; then # a key per subscriber (docs/SECURITY.md)
		for i in 1 2 3; do
			(umask 077; echo "1$i $(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$T/peer$i")
		done
		(umask 077; cat "$T/peer1" "$T/peer2" "$T/peer3" > "$T/peers")
		RK="$RK --peer-keys $T/peers" S1=,key=11 S2=,key=12 S3=,key=13
	fi
else # the keyless path: unsigned frames, no key at the relay
	"$BFP" pcap "$T/p" -o "$T/frames.pcap" --dst 198.18.0.1:7400 || fail pcap
	cp "$T/frames.pcap" "$T/signed.pcap"
	RK="--insecure"
fi
nbad=$(python3 "$HERE/pcaptool.py" mix "$T/signed.pcap" "$T/in.pcap") || fail mix
TXP="tx_pcap=$T/out0.pcap"
for q in $(seq 1 $((FAN - 1))); do TXP="$TXP,tx_pcap=$T/out$q.pcap"; done
# shellcheck disable=SC2086 # LC and EXTRA are lists of options
"$RELAY" --no-huge -m 1024 --no-pci --file-prefix bfprelay$$ $LC --log-level=lib.eal:error \
	--vdev=net_pcap0,rx_pcap="$T/in.pcap",$TXP $EXTRA -- \
	--ip 0:198.18.0.1 --check-crc --run-time 3 $RK $APPX \
	--subscriber 198.18.0.11:7500,mac=02:00:00:00:00:11$S1 \
	--subscriber 198.18.0.12:7500,mac=02:00:00:00:00:12$S2 \
	--subscriber 198.18.0.13:7600,mac=02:00:00:00:00:13$S3 > "$T/relay.log" 2>&1 &
RPID=$!
# while it runs, its per-subscriber counters are readable through DPDK
# telemetry (names of letters, digits and '_', which telemetry accepts)
if command -v dpdk-telemetry.py >/dev/null; then
	for _ in $(seq 50); do grep -q "checksums in" "$T/relay.log" && break; sleep 0.05; done
	echo /bfpatch/subscribers | timeout 10 dpdk-telemetry.py -f bfprelay$$ > "$T/tel" 2>&1
	python3 - "$T/tel" <<'PY' || { kill "$RPID"; cat "$T/tel"; fail "telemetry"; }
import json, sys
docs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
subs = next(d["/bfpatch/subscribers"] for d in docs if "/bfpatch/subscribers" in d)
want = {"198_18_0_11_7500", "198_18_0_12_7500", "198_18_0_13_7600"}
got = {k.rsplit("_", 1)[0] for k in subs}
assert got == want and len(subs) == 9, subs
PY
fi
wait "$RPID" || { cat "$T/relay.log"; fail "relay exited with an error"; }
# each TX queue's capture: what its fan-out lcore sent (queue 0: the main
# lcore's, ARP too); the destinations each sent to are disjoint, and with
# several lanes each sent to one at least (3 subscribers, up to 3 lanes)
python3 - "$HERE" "$T" "$FAN" <<'PY' || { cat "$T/relay.log"; fail "outputs by fan-out lcore"; }
import sys
sys.path.insert(0, sys.argv[1])
from pcaptool import read_pcap, write_pcap, outputs
t, fan = sys.argv[2], int(sys.argv[3])
alls, dests = [], []
for q in range(fan):
    alls += read_pcap("%s/out%d.pcap" % (t, q))
    dests.append({(u[1], u[3]) for _, u in outputs("%s/out%d.pcap" % (t, q)) if u})
write_pcap(t + "/out.pcap", alls)
for a in range(fan):
    assert fan == 1 or dests[a], "fan-out lcore %d sent nothing" % a
    for b in range(a):
        assert not dests[a] & dests[b], "lanes %d and %d sent to the same subscriber" % (b, a)
PY
if [ "$KEY" = perhop ]; then
	python3 "$HERE/pcaptool.py" check-perhop "$T/frames.pcap" "$T/out.pcap" \
		"198.18.0.11:7500=$T/peer1,198.18.0.12:7500=$T/peer2,198.18.0.13:7600=$T/peer3" ||
		{ cat "$T/relay.log"; exit 1; }
else
	python3 "$HERE/pcaptool.py" check "$T/frames.pcap" "$T/out.pcap" 3 || { cat "$T/relay.log"; exit 1; }
fi
drops=$(awk '$1 ~ /^drop_(short|ethertype|ip|not_ours|proto|udp|port|frame|encoding|arp)$/ {s += $2} END {print s}' "$T/relay.log")
[ "$drops" = "$nbad" ] || { cat "$T/relay.log"; fail "relay counted $drops malformed packets, $nbad were sent"; }
newer=$(awk '$1 == "drop_encoding" {print $2}' "$T/relay.log")
[ "$newer" = 1 ] || { cat "$T/relay.log"; fail "drop_encoding $newer, 1 frame in an unknown encoding was sent"; }
da=$(awk '$1 == "drop_auth" {print $2}' "$T/relay.log")
[ "$da" = "$ntamp" ] || { cat "$T/relay.log"; fail "drop_auth $da, $ntamp tampered frames were sent"; }
if [ -n "$KEY" ]; then
	dr=$(awk '$1 == "drop_other_run" {print $2}' "$T/relay.log")
	[ "$dr" = "$nother" ] || { cat "$T/relay.log"; fail "drop_other_run $dr, $nother frames of another run were sent"; }
	cr=$(awk '$1 == "cache_replaced" {print $2}' "$T/relay.log")
	[ "$cr" = 0 ] || { cat "$T/relay.log"; fail "frames of another run replaced $cr cached frames"; }
fi
echo "ok - $nbad malformed packets dropped and counted, $ntamp tampered frames refused (drop_auth)${nother:+, $nother frames of another run refused (drop_other_run)}"
