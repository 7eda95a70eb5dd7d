#!/bin/sh
# demo_test.sh BFPATCH: the README's main job, `bfpatch demo`, end to end:
# publisher -> bfpatch-relay (DPDK net_tap, in namespaces the demo creates)
# -> 3 shims, then the documented loopback fallback. The demo byte-compares
# every actor's buffer with the trainer's weights after each step; this
# test checks that it said so for every step, exited 0, ran every process
# with the key it made, and left nothing behind (processes, namespaces,
# shared-memory buffers, work directory).
set -u
BFP=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; cat "$T"/out*.txt; exit 1; }
leftovers() {
	ip netns list 2>/dev/null | grep -q '^bfpd' && echo "namespaces"
	ls /dev/shm 2>/dev/null | grep -q '^bfpdemo' && echo "shm buffers"
	ls /tmp 2>/dev/null | grep -q '^bfpdemo\.' && echo "work directories"
	pgrep -f 'bfpatch-shim --buffer /dev/shm/bfpdemo' >/dev/null && echo "shims"
	pgrep -f 'file-prefix bfpd' >/dev/null && echo "relays"
}
[ -z "$(leftovers)" ] || { echo "skip: a demo is already running here"; exit 77; }

mode=relay
[ "$(id -u)" = 0 ] || mode=loopback
"$BFP" demo -p 1M -n 3 --keep "$T/kept" --report "$T/report.html" > "$T/out1.txt" 2>&1 ||
	fail "demo exited $?"
cat "$T/out1.txt"
if [ $mode = relay ]; then
	grep -q "bfpatch-relay (DPDK net_tap" "$T/out1.txt" || fail "the demo did not use the relay"
	grep -q "relay: rx [1-9]" "$T/out1.txt" || fail "no frames went through the relay"
fi
n=$(grep -c "yes, all 3 (byte compare)" "$T/out1.txt")
[ "$n" = 3 ] || fail "$n of 3 steps verified"
grep -q "all 3 steps: every actor bit-exact" "$T/out1.txt" || fail "no summary"
# every process held the key the demo made (none ran --insecure, and
# none runs without one or the other)
[ "$(stat -c %a "$T/kept/key" 2>/dev/null)" = 600 ] || fail "no key (mode 0600) in the work directory"
grep -q "^[0-9]* [0-9a-f]\{64\}$" "$T/kept/key" || fail "the demo's key is not a key file"
grep -l "insecure" "$T/kept"/*.log && fail "a process of the demo ran without authentication"
[ $mode = relay ] && rel=relay || rel=""
/usr/bin/python3 "$(dirname "$0")/check_events.py" "$T/kept/events.jsonl" 3 $rel || fail "event log"
[ -z "$(leftovers)" ] || fail "left behind: $(leftovers)"
# the report of the run: every section drawn from the run's own data
for sec in summary heatmap budget refresh timeline topology; do
	grep -q "id=\"$sec\" data-status=\"ok\"" "$T/report.html" || fail "report: no $sec section"
done
for a in actor1 actor2 actor3; do
	grep -q "$a" "$T/report.html" || fail "report: $a missing from the timeline/topology"
done
# every address a subscriber event names is a process of the run (the
# relay by the addr of its start event), and no JOIN marker shows as a version
grep -q 'no log names this address' "$T/report.html" && fail "report: an address no log names"
grep -q 'v429496729' "$T/report.html" && fail "report: a JOIN marker shown as a version"

"$BFP" demo -p 300k -n 2 --loopback > "$T/out2.txt" 2>&1 || fail "loopback demo exited $?"
grep -q "over loopback, no relay (--loopback)" "$T/out2.txt" || fail "no fallback notice"
[ "$(grep -c 'yes, all 3 (byte compare)' "$T/out2.txt")" = 2 ] || fail "loopback steps"
[ -z "$(leftovers)" ] || fail "left behind: $(leftovers)"
echo "ok - bfpatch demo: $mode and loopback runs verified every step on 3 actors, nothing left behind"
