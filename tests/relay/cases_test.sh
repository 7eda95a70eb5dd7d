#!/bin/sh
# cases_test.sh BFPATCH RELAY: bfpatch-relay on net_pcap against inputs of
# tests/relay/cases.py, each a case the relay once got wrong: a frame of a
# reserved version poisoning the cache and the versions told; NACK misses
# beyond what one NACK upstream holds, never asked; an actor's new MAC not
# followed; a JOIN with another data port taken as a second subscriber; a forged JOIN from the upstream's address (frames would loop);
# a static subscriber whose one ARP went unanswered, or that moved (its
# MAC never asked again); a JOINed subscriber's MAC taken by an ARP
# answer for the gateway; subscribers and an
# upstream behind a router (--gateway); one host JOINing from many ports
# taking the whole subscriber table; a version made again with other
# content after a publisher restart, its old frames answering NACKs; slow subscribers
# taking every header mbuf from an unpaced one; a worker lcore with a
# high id (120).
set -u
BFP=$1
RELAY=$2
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
P=bfprc$$
trap 'rm -rf "$T" /var/run/dpdk/$P' EXIT
fail() { echo "FAIL: $*"; [ -f "$T/log" ] && cat "$T/log"; exit 1; }

"$BFP" synth -o "$T/traj" -p 8M -n 1 -S 5 2>/dev/null || fail synth
# small frames: about 2000, more than 17 slow subscribers may hold queued
"$BFP" diff -q -s 160 "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p" || fail diff
"$BFP" pcap "$T/p" -o "$T/frames.pcap" --dst 198.18.0.1:7400 || fail pcap
nframes=$("$BFP" info --json "$T/p" | python3 -c 'import json, sys; print(json.load(sys.stdin)["frames"])')

# run CASE [EAL...] -- RELAY-OPTIONS...: the case's input through the relay;
# its counters in $T/log, its output in $T/out.pcap. The cases are unsigned
# packets crafted here, so the relay runs --insecure: its classifier and
# control paths without keys.
run() {
	c=$1
	shift
	eal=""
	while [ $# -gt 0 ] && [ "$1" != -- ]; do eal="$eal $1"; shift; done
	shift
	python3 "$HERE/cases.py" gen "$c" "$T/frames.pcap" "$T/in.pcap" || fail "gen $c"
	# shellcheck disable=SC2086 # eal is a list of options
	"$RELAY" --no-huge -m 1024 --no-pci --file-prefix $P ${eal:--l 0} --log-level=lib.eal:error \
		--vdev=net_pcap0,rx_pcap="$T/in.pcap",tx_pcap="$T/out.pcap" -- --ip 0:198.18.0.1 \
		--insecure "$@" > "$T/log" 2>&1
	rc=$?
	rm -rf /var/run/dpdk/$P
	return $rc
}
counter() { awk -v k="$1" '$1 == k {print $2}' "$T/log"; }

run reserved -- --run-time 1.5 --check-crc || fail "relay (reserved)"
[ "$(counter drop_bad_version)" = 1 ] || fail "a frame of version 0xFFFFFFFF was not dropped"
[ "$(counter cache_hits)" = 10 ] || fail "the NACK after a reserved version was not answered from the cache"
echo "ok - a frame of a reserved version dropped; the real patch cached and served"

run nack-ranges -- --run-time 1.5 --upstream 198.18.0.2:7401 || fail "relay (nack-ranges)"
unasked=$(counter nack_frames_unasked)
supp=$(counter nack_suppressed)
[ "${unasked:-0}" -gt 0 ] || fail "no NACK misses beyond one NACK upstream"
# the second NACK: only what the first asked is suppressed
[ "${supp:-0}" -lt $((nframes / 2)) ] || fail "the misses left out were suppressed too ($supp)"
echo "ok - NACK misses beyond one NACK upstream left to be asked again ($unasked; suppressed $supp)"

run new-mac -- --run-time 1 || fail "relay (new-mac)"
python3 "$HERE/cases.py" check new-mac "$T/out.pcap" || fail "a subscriber's new MAC was not followed"

run moved -- --run-time 1 || fail "relay (moved)"
python3 "$HERE/cases.py" check moved "$T/out.pcap" || fail "a JOIN with another data port made a second subscription"

run upstream-join -- --run-time 1 --upstream 198.18.0.2:7401 || fail "relay (upstream-join)"
python3 "$HERE/cases.py" check upstream-join "$T/out.pcap" || fail "a JOIN from the upstream was taken"
[ "$(counter joins)" = 0 ] || fail "a JOIN from the upstream's address was counted as a subscriber"

run join-flood -- --run-time 1 --max-per-host 4 || fail "relay (join-flood)"
python3 "$HERE/cases.py" check join-flood "$T/out.pcap" 4 || fail "one host's JOINs beyond --max-per-host 4 were taken"
[ "$(counter joins_refused)" = 16 ] || fail "joins_refused $(counter joins_refused), not 16"
run join-flood -- --run-time 1 || fail "relay (join-flood, default)"
python3 "$HERE/cases.py" check join-flood "$T/out.pcap" 16 || fail "one host's JOINs beyond the default 16 were taken"

run static-join -- --run-time 1 --subscriber 198.18.0.11:7500 --max-per-host 2 ||
	fail "relay (static-join)"
python3 "$HERE/cases.py" check static-join "$T/out.pcap" || fail "JOINs through a static subscriber's control port passed --max-per-host"

run recount -- --run-time 1.5 || fail "relay (recount)"
[ "$(counter cache_replaced)" = 0 ] || fail "a frame resent with another frame count dropped its version"
[ "$(counter cache_hits)" = 20 ] || fail "cache_hits $(counter cache_hits) after a frame resent with another count"
echo "ok - a frame resent with only another frame count keeps its version cached"

run remade -- --run-time 1.5 || fail "relay (remade)"
python3 "$HERE/cases.py" check remade "$T/out.pcap" "$T/frames.pcap" || fail "NACKs answered with a version's frames of before its publisher made it again"
[ "$(counter cache_replaced)" = 100 ] || fail "cache_replaced $(counter cache_replaced), not the 100 old frames"

run gateway -- --run-time 2.5 --ip 0:198.18.0.1/24 --gateway 0:198.18.0.254 \
	--upstream 198.19.5.5:7401 --subscriber 198.19.6.6:7500 || fail "relay (gateway)"
python3 "$HERE/cases.py" check gateway "$T/out.pcap" || fail "addresses off the subnet did not go through --gateway"
for bad in "--ip 0:198.18.0.1 --gateway 0:198.18.0.254" "--ip 0:198.18.0.1/24 --gateway 0:10.0.0.1" \
	"--ip 0:198.18.0.1/33" "--ip 0:198.18.0.1/24 --gateway 0:198.18.0.1"; do
	# shellcheck disable=SC2086 # bad is a list of options
	if run gateway -- --run-time 1 $bad; then
		fail "relay started with $bad"
	fi
	grep -q "bfpatch-relay: .*\(gateway\|prefix\)" "$T/log" || fail "no clear error for $bad"
done
echo "ok - a gateway refused without a subnet, off it, or at the relay's address"

run join-arp -- --run-time 1 --ip 0:198.18.0.1/24 --gateway 0:198.18.0.254 ||
	fail "relay (join-arp)"
python3 "$HERE/cases.py" check join-arp "$T/out.pcap" || fail "an ARP answer took a JOINed subscriber's frames"

run rearp -- --run-time 11.5 --subscriber 198.18.0.11:7500 || fail "relay (rearp)"
python3 "$HERE/cases.py" check rearp "$T/out.pcap" || fail "a static subscriber's new MAC was not followed"

run no-arp -- --run-time 3 --subscriber 198.18.0.11:7500 || fail "relay (no-arp)"
python3 "$HERE/cases.py" check no-arp "$T/out.pcap" || fail "a static subscriber's lost ARP was not asked again"

slow=""
for i in $(seq 20 36); do slow="$slow --subscriber 198.18.0.$i:7500,mac=02:00:00:00:00:$i,rate=1m"; done
# shellcheck disable=SC2086 # slow is a list of options
run slow -- --run-time 3 --subscriber 198.18.0.11:7500,mac=02:00:00:00:00:11 $slow || fail "relay (slow)"
python3 "$HERE/cases.py" check slow "$T/out.pcap" "$nframes" || fail "slow subscribers starved an unpaced one"
[ "$(counter drop_no_mbuf)" = 0 ] || fail "mbufs ran out: $(counter drop_no_mbuf)"

# per-lcore state is indexed by lcore id, up to DPDK's RTE_MAX_LCORE
# (128 in Debian's build): a worker numbered 120 receives, and what it
# counts is in the totals
run slow --lcores 0@0,120@0 -- --run-time 1 --subscriber 198.18.0.11:7500,mac=02:00:00:00:00:11 ||
	fail "relay with worker lcore id 120"
grep -q "1 worker lcore" "$T/log" || fail "lcore 120 did not work as a worker"
[ "$(counter rx)" -gt 0 ] || fail "frames received on lcore 120 were not counted"
echo "ok - a worker at lcore id 120 receives and is counted"
