#!/bin/bash
# kill_test.sh COMPONENT TRIALS BFPATCH SHIM [RELAY]: SIGKILL one part of
# the pipeline at random moments while the trainer keeps publishing, over
# TRIALS trials, restarting it each time; after every kill no weight
# buffer may serve a corrupt version (check_served.py: a READY buffer
# holds exactly its version's checkpoint, by sha256), and at the end every
# actor must reach the last version bit-exactly (check_buffers.py).
#   shim       one shim on loopback; odd trials kill it halfway through a
#              commit (--crash-after: SIGKILL between frames), even trials
#              at a random moment
#   publisher  the publisher (restarted with --resume --history)
#   relay      bfpatch-relay (net_tap, bridged) in front of 3 shims, each in
#              its own network namespace
set -u
COMP=$1
TRIALS=$2
BFP=$3
SHIM=$4
RELAY=${5:-}
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
SHM=/dev/shm/bfpkill$$
P=bfpk$$
PUB=""
RELAY_PID=""
cleanup() {
	for p in ${SHIM1:-} ${SHIM2:-} ${SHIM3:-} $PUB $RELAY_PID; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ "$COMP" = relay ]; then
		for n in "$P" "${P}a1" "${P}a2" "${P}a3"; do ip netns del "$n" 2>/dev/null; done
	fi
	rm -rf "$T" "$SHM".* /var/run/dpdk/$P
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
	echo "FAIL: $*"
	for f in "$T"/*.log; do echo "== $f"; tail -n 12 "$f"; done
	exit 1
}
port=$((20000 + ($$ + 23) % 20000))
X=""
NACTORS=1
UP=127.0.0.1:$port
PUB_LISTEN=127.0.0.1:$port
if [ "$COMP" = relay ]; then
	[ "$(id -u)" = 0 ] && [ -x "$RELAY" ] && ip netns add "$P" 2>/dev/null ||
		{ echo "skip: needs root, ip netns and bfpatch-relay"; exit 77; }
	X="ip netns exec $P"
	. "$HERE/netns_lib.sh"
	bridged_actors "$P" 3 bfpk || fail "network namespaces"
	NACTORS=3
	UP=198.18.0.1:7401
	PUB_LISTEN=198.18.0.10:7401
fi

"$BFP" synth -o "$T/traj" -p 1M -n "$TRIALS" -S 41 2>/dev/null || fail synth
"$BFP" keygen "$T/key" 2>/dev/null || fail keygen
K="--key $T/key" # every part authenticates, as deployed
mkdir "$T/live" "$T/hist"
cp "$T/traj/step-0000.safetensors" "$T/live/"
publish_next() { # the trainer writes checkpoint $1 (atomically)
	f=$(printf "step-%04d.safetensors" "$1")
	cp "$T/traj/$f" "$T/live/.$f" && mv "$T/live/.$f" "$T/live/$f"
}
start_pub() {
	$X "$BFP" publish $K --dir "$T/live" --listen $PUB_LISTEN --keep 16 --history "$T/hist" \
		--resume --linger 3600 >> "$T/publish.log" 2>&1 &
	PUB=$!
}
start_shim() { # actor, extra options
	a=$1
	shift
	ns=""
	listen=127.0.0.1:$((port + a))
	if [ "$COMP" = relay ]; then
		ns="ip netns exec ${P}a$a"
		listen=198.18.0.2$a:7500
	fi
	init=""
	[ -e "$SHM.$a" ] || init="--init $T/traj/step-0000.safetensors"
	$ns "$SHIM" $K --buffer "$SHM.$a" $init --upstream $UP --listen $listen --threads 1 "$@" \
		>> "$T/shim$a.log" 2>&1 &
	eval "SHIM$a=$!"
}
start_relay() {
	$X "$RELAY" --no-huge -m 512 --no-pci --file-prefix "$P" -l 0 --log-level=lib.eal:error \
		--vdev=net_tap0,iface=bfpkr -- --ip 0:198.18.0.1 --upstream 198.18.0.10:7401 \
		--cache-versions 4 $K >> "$T/relay.log" 2>&1 &
	RELAY_PID=$!
	for n in $(seq 100); do
		$X ip link show bfpkr >/dev/null 2>&1 && [ "$(grep -c 'checksums in' "$T/relay.log")" -ge "$1" ] && break
		sleep 0.1
	done
	$X ip link set bfpkr address 02:00:00:00:ee:10 && $X ip link set bfpkr master br0 &&
		$X ip link set bfpkr up || fail "relay $1 did not come up"
}
buffers() { for a in $(seq $NACTORS); do echo "$SHM.$a"; done; }
wait_version() { # version, timeout s
	for n in $(seq $(($2 * 10))); do
		ok=1
		for b in $(buffers); do
			v=$(od -An -tu4 -j64 -N8 "$b" 2>/dev/null | awk '{print ($2 == 0) ? $1 : -1}')
			[ "${v:--1}" -ge "$1" ] || ok=0
		done
		[ $ok = 1 ] && return 0
		sleep 0.1
	done
	return 1
}

[ "$COMP" = relay ] && start_relay 1
start_pub
for a in $(seq $NACTORS); do start_shim $a; done
for n in $(seq 50); do [ -e "$SHM.1" ] && grep -q joined "$T/publish.log" && break; sleep 0.1; done
sleep 1.2
declare -A seen
for i in $(seq "$TRIALS"); do
	case $COMP in
	shim)
		kill -9 $SHIM1 2>/dev/null; wait $SHIM1 2>/dev/null
		if [ $((i % 2)) = 1 ]; then
			start_shim 1 --crash-after 1
			sleep 0.3
			publish_next "$i"
			for n in $(seq 100); do kill -0 $SHIM1 2>/dev/null || break; sleep 0.1; done
			kill -0 $SHIM1 2>/dev/null && fail "trial $i: the shim did not crash in its commit"
		else
			start_shim 1
			sleep 0.3
			publish_next "$i"
			sleep "0.$((RANDOM % 400))"
			kill -9 $SHIM1
		fi
		wait $SHIM1 2>/dev/null
		;;
	publisher)
		publish_next "$i"
		sleep "0.$((RANDOM % 500 + 50))"
		kill -9 $PUB; wait $PUB 2>/dev/null
		start_pub
		;;
	relay)
		publish_next "$i"
		sleep "0.$((RANDOM % 500 + 50))"
		kill -9 $RELAY_PID; wait $RELAY_PID 2>/dev/null
		start_relay $((i + 1))
		;;
	esac
	s=$(python3 "$HERE/check_served.py" "$T/traj" $(buffers)) || fail "trial $i: $s"
	for w in $s; do seen[$w]=$((${seen[$w]:-0} + 1)); done
done
[ "$COMP" = shim ] && { kill -9 $SHIM1 2>/dev/null; wait $SHIM1 2>/dev/null; start_shim 1; }
wait_version "$TRIALS" 90 || fail "not every actor reached version $TRIALS"
python3 "$HERE/check_buffers.py" "$T/traj/$(printf 'step-%04d.safetensors' "$TRIALS")" $(buffers) ||
	fail "final buffers"
resumed=$(cat "$T"/shim*.log | grep -c "was interrupted; finishing it")
keyed=$(cat "$T"/shim*.log | grep -c "keyframe resync")
echo "ok - $COMP: $TRIALS SIGKILL trials; after each kill the buffers were ready (bit-exact) ${seen[ready]:-0}, mid-commit ${seen[committing]:-0}, awaiting resync ${seen[resync]:-0} times, never corrupt; $resumed interrupted commits finished on restart, $keyed keyframe resyncs; all $NACTORS actor(s) reached version $TRIALS bit-exactly"
