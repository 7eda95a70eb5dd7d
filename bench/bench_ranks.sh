#!/bin/sh
# bench_ranks.sh [BUILD] [PARAMS] [STEPS]: encode time per version of a
# sharded trainer, 1 rank against 2, on this machine over loopback. A
# synthetic trajectory (bfpatch synth, lr 1e-6) is published by a lead
# (`bfpatch publish --ranks R`) from R ranks (`--dir --lead --owned`),
# the tensors split between the ranks by size; each rank (the single one
# too) is pinned to a CPU of its own (taskset) where the machine has
# enough, as ranks on hosts of equal cores would be. Prints the lead's
# mean of the slowest rank's encode per version, each rank's mean, and
# the lead's time to tile, verify and apply a version. Defaults: build,
# 32M, 3.
set -u
BUILD=${1:-build}
PARAMS=${2:-32M}
STEPS=${3:-3}
BFP=$(cd "$BUILD" && pwd)/cli/bfpatch
[ -x "$BFP" ] || { echo "no $BFP: build first" >&2; exit 1; }
T=$(mktemp -d)
PIDS=""
trap 'for p in $PIDS; do kill "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
port=$((30000 + $$ % 20000))
"$BFP" synth -q -o "$T/traj" -p "$PARAMS" -n "$STEPS" || exit 1
# owned sets: tensors by size, largest first, each to the rank with fewest
python3 - "$T" <<'PYEOF' || exit 1
import json, struct, sys
T = sys.argv[1]
d = open(T + "/traj/step-0000.safetensors", "rb").read(8)
h = json.loads(open(T + "/traj/step-0000.safetensors", "rb").read(8 + struct.unpack("<Q", d)[0])[8:])
t = sorted(((v["data_offsets"][1] - v["data_offsets"][0], k) for k, v in h.items()
            if k != "__metadata__"), reverse=True)
for n in (1, 2):
    own, size = [[] for _ in range(n)], [0] * n
    for b, k in t:
        i = size.index(min(size))
        own[i].append(k)
        size[i] += b
    for i in range(n):
        open("%s/own%d.%d" % (T, n, i), "w").write("\n".join(own[i]) + "\n")
PYEOF
cpus=$(nproc)
echo "bench_ranks: $PARAMS parameters, $STEPS versions, $cpus CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
printf '%-6s %-28s %-26s %s\n' ranks "encode/version (slowest)" "each rank's mean" "lead: tile+verify+apply"
for R in 1 2; do
	"$BFP" publish --insecure --ranks $R --rank-listen 127.0.0.1:$((port + 1)) \
		--init "$T/traj/step-0000.safetensors" --listen 127.0.0.1:$port --steps "$STEPS" \
		--linger 0 > "$T/lead$R.log" 2>&1 &
	LEAD=$!
	PIDS="$LEAD"
	sleep 0.5
	for i in $(seq 0 $((R - 1))); do
		pin=""
		[ "$cpus" -ge "$R" ] && pin="taskset -c $i"
		$pin "$BFP" publish --insecure --dir "$T/traj" --lead 127.0.0.1:$((port + 1)) \
			--rank "$i" --owned "$T/own$R.$i" --steps "$STEPS" > "$T/rank$R.$i.log" 2>&1 &
		PIDS="$PIDS $!"
	done
	wait "$LEAD" || { cat "$T/lead$R.log"; exit 1; }
	for p in $PIDS; do wait "$p" 2>/dev/null; done
	PIDS=""
	slow=$(sed -n 's/.*ranks. encode per version: \([0-9.]*\) ms mean.*/\1/p' "$T/lead$R.log")
	ver=$(sed -n 's/.*tiling, verification and apply \([0-9.]*\) ms mean.*/\1/p' "$T/lead$R.log")
	each=$(for i in $(seq 0 $((R - 1))); do
		sed -n 's/.*encode per version: \([0-9.]*\) ms mean.*/\1/p' "$T/rank$R.$i.log"
	done | tr '\n' ' ')
	printf '%-6s %-28s %-26s %s\n' "$R" "$slow ms" "$each(ms)" "$ver ms"
	port=$((port + 2))
done
