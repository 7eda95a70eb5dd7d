#!/bin/bash
# bench_rl.sh [BUILD_DIR] [VERSIONS] [LAYERS] [WAYS]: an RL stack's weight
# refresh, from the trainer's publish call to the last actor's torch
# tensors updated, for a GPT of LAYERS blocks of width 1024 (default 14:
# 210 M parameters, BF16) and VERSIONS Adam steps at lr 1e-6 (default 3),
# to 3 actors, side by side in one run (bench_rl.py says how each is
# timed): bfpatch with change lists scattered into the actors' tensors;
# torch.distributed broadcast (gloo) of the whole state_dict, as RL
# stacks refresh dense; bfpatch followed by a full copy into the actors'
# tensors (load_weights style); bfpatch from two trainer ranks. WAYS
# picks some of them: changes,dense,copy,changes2 (the default).
#
# The versions come from a real torch model and optimizer (a randomly
# initialised transformer, FP32 master, Adam), not from `bfpatch synth`:
# the actors hold that model's state_dict (173 tensors of many shapes)
# and the changed fraction is what Adam's steps give. Making them takes
# 2-3 minutes of the run on 2 vCPUs; the whole run takes 8-9 minutes
# there and at most about 8 GiB of memory.
#
# Network namespaces this script makes and deletes (needs root): the
# trainer's, whose only link (veth, eth0 at 198.18.0.5) is shaped on its
# egress with tbf to 1 Gbit/s, and behind it a bridge namespace and one
# namespace per actor (198.18.0.21-23, unshaped veth pairs); every byte
# from the trainer to the actors crosses the 1 Gbit/s link, whatever
# the actors send each other does not.
set -u
B=${1:-build}
VERSIONS=${2:-3}
LAYERS=${3:-14}
WAYS=${4:-changes,dense,copy,changes2}
ACTORS=3
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
B=$(cd "$B" 2>/dev/null && pwd) || { echo "bench_rl: no build directory $1"; exit 1; }
BFP=$B/cli/bfpatch
SHIM=$B/host_shim/bfpatch-shim
[ "$(id -u)" = 0 ] || { echo "bench_rl: needs root (network namespaces)"; exit 1; }
for f in "$BFP" "$SHIM" "$B/publisher/libbfpatch_wbuf.so"; do
	[ -e "$f" ] || { echo "bench_rl: $f missing (build first)"; exit 1; }
done
/usr/bin/python3 -c "import torch, numpy" 2>/dev/null || { echo "bench_rl: needs python3-torch"; exit 1; }
"$ROOT/python/make-venv.sh" "$B/pyenv" || { echo "bench_rl: python/make-venv.sh failed"; exit 1; }
export BFPATCH_WBUF_LIB=$B/publisher/libbfpatch_wbuf.so
T=$(mktemp -d /tmp/bfprl.XXXXXX)
P=bfprl$$
SHM=/dev/shm/bfprl$$
cleanup() {
	[ -n "${DRIVER:-}" ] && kill -TERM "$DRIVER" 2>/dev/null && wait "$DRIVER" 2>/dev/null
	for ns in "$P" "${P}t" $(seq -f "${P}a%g" "$ACTORS"); do ip netns del "$ns" 2>/dev/null; done
	rm -rf "$T" "$SHM".*
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$ROOT/tests/netns_lib.sh"
ip netns add "$P" && bridged_actors "$P" "$ACTORS" rla &&
	ip netns add "${P}t" &&
	ip link add rlt netns "$P" type veth peer name eth0 netns "${P}t" &&
	ip netns exec "$P" ip link set rlt master br0 &&
	ip netns exec "$P" ip link set rlt up &&
	ip netns exec "${P}t" ip link set lo up &&
	ip netns exec "${P}t" ip addr add 198.18.0.5/24 dev eth0 &&
	ip netns exec "${P}t" ip link set eth0 up &&
	ip netns exec "${P}t" tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 100ms ||
	{ echo "bench_rl: cannot build the namespaces"; exit 1; }
"$BFP" keygen "$T/key" 2>/dev/null || exit 1
ip netns exec "${P}t" "$B/pyenv/bin/python" "$HERE/bench_rl.py" run --bfp "$BFP" --shim "$SHIM" \
	--dir "$T" --shm "$SHM" --key "$T/key" --versions "$VERSIONS" --layers "$LAYERS" \
	--ways "$WAYS" --trainer-addr 198.18.0.5 \
	--actor-ns "$(seq -s, -f "${P}a%g" "$ACTORS")" \
	--actor-addr "$(seq -s, -f "198.18.0.2%g" "$ACTORS")" &
DRIVER=$!
wait $DRIVER
rc=$?
DRIVER=""
[ $rc = 0 ] || { for f in "$T"/*.log; do echo "== $f"; tail -n 15 "$f"; done; exit $rc; }
echo "command: bench/bench_rl.sh ${1:-build} $VERSIONS $LAYERS $WAYS"
