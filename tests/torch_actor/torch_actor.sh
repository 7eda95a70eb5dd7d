#!/bin/sh
# torch_actor.sh BFPATCH SHIM BUILD_ROOT: a real torch actor, end to end.
# A trainer (trainer.py: a small transformer, FP32 master weights, Adam
# at lr 1e-6) publishes the BF16 cast of each step with bfpatch.Publisher;
# `bfpatch publish --buffer` sends each version to a keyed bfpatch-shim
# (--commit safe-point); the actor (actor.py) holds its own instance of
# the model on its device (CPU here) and, at safe points between forward
# passes, scatters the change lists into its parameters (apply_changes).
# After every version its parameters equal the trainer's BF16 parameters
# bit for bit and its output on fixed inputs equals the trainer's, both
# compared with what the trainer wrote to files of its own (torch.save),
# not with the buffer; a control instance that skips one version's list
# must fail those checks. Run with one trainer rank, then with two, each
# publishing its half of the tensors (by name) through a lead publisher.
# Set-up as tests/python_pkg/lib.sh; skipped (77) without python3-torch.
set -u
. "$(dirname "$0")/../python_pkg/lib.sh"
"$PY" -c "import torch" 2>/dev/null || { echo "skip: needs python3-torch"; exit 77; }
export BFPATCH_WBUF_LIB="$BUILD/publisher/libbfpatch_wbuf.so"
[ -f "$BFPATCH_WBUF_LIB" ] || fail "no $BFPATCH_WBUF_LIB"
asan=$(ldd "$BFPATCH_WBUF_LIB" | awk '/libasan/ {print $3}')
[ -z "$asan" ] || PY="env LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0 $PY"
D=$(cd "$(dirname "$0")" && pwd)
N=5 # versions; the trainer publishes 3 and 4 back to back (a chain of two lists)

# scenario NAME RANKS: trainer rank(s), publisher(s), a shim and the actor
scenario() {
	name=$1 ranks=$2
	W=$T/$name
	mkdir -p "$W"
	TRAINERS=""
	for r in $(seq 0 $((ranks - 1))); do
		$PY "$D/trainer.py" "$W" "$SHM.$name.t$r" $N --rank $r --ranks $ranks \
			> "$T/$name-trainer$r.log" 2>&1 &
		TRAINERS="$TRAINERS $!"
	done
	PIDS="$PIDS $TRAINERS"
	# each rank says so once its buffer (and, rank 0, the first checkpoint) is there
	for r in $(seq 0 $((ranks - 1))); do
		wait_line "^trainer rank $r/$ranks:" "$T/$name-trainer$r.log" 600 ||
			fail "$name: trainer rank $r did not start"
	done
	if [ "$ranks" = 1 ]; then
		"$BFP" publish $K --buffer "$SHM.$name.t0" --listen 127.0.0.1:$port \
			--wait-subscribers 1 --steps $N --linger 1 > "$T/$name-publish.log" 2>&1 &
		PIDS="$PIDS $!"
		wait_line "waiting for 1 subscriber" "$T/$name-publish.log" 300 ||
			fail "$name: the publisher did not start"
	else
		"$BFP" publish $K --ranks $ranks --rank-listen 127.0.0.1:$((port + 2)) \
			--init "$W/step-0000.safetensors" --listen 127.0.0.1:$port \
			--wait-subscribers 1 --steps $N --linger 1 > "$T/$name-lead.log" 2>&1 &
		PIDS="$PIDS $!"
		for r in $(seq 0 $((ranks - 1))); do
			"$BFP" publish $K --buffer "$SHM.$name.t$r" --lead 127.0.0.1:$((port + 2)) \
				--rank $r > "$T/$name-rank$r.log" 2>&1 &
			PIDS="$PIDS $!"
		done
		wait_line "waiting for 1 subscriber" "$T/$name-lead.log" 300 ||
			fail "$name: the lead publisher did not start"
	fi
	"$SHIM" $K --buffer "$SHM.$name.a" --init "$W/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 1)) --commit safe-point \
		--exit-after 240 > "$T/$name-shim.log" 2>&1 &
	PIDS="$PIDS $!"
	$PY "$D/actor.py" "$W" "$SHM.$name.a" $N --device cpu > "$T/$name-actor.log" 2>&1 ||
		fail "$name: the actor"
	sed "s/^/$name: /" "$T/$name-actor.log"
	for p in $TRAINERS; do wait "$p" || fail "$name: a trainer rank failed"; done
	stop_pids
	for r in $(seq 0 $((ranks - 1))); do
		grep -q "version $N published" "$T/$name-trainer$r.log" ||
			fail "$name: trainer rank $r did not publish version $N"
		grep "published" "$T/$name-trainer$r.log" | sed "s/^/$name: /"
	done
	grep -q "committed version [0-9]* -> $N" "$T/$name-shim.log" ||
		fail "$name: the shim did not commit version $N"
	if [ "$ranks" -gt 1 ]; then
		# each rank encoded only its part, and the parts make the model
		owned=$(cat "$T/$name"-rank*.log | sed -n 's/.*: version 0 from .*, \([0-9]*\) of \([0-9]*\) parameters owned.*/\1 \2/p')
		echo "$owned" | awk -v r=$ranks '{ s += $1; if ($1 >= $2) bad = 1; m = $2; k++ }
			END { exit !(k == r && s == m && !bad) }' ||
			fail "$name: the ranks did not each publish a part of the model: $owned"
		grep -q "version $((N - 1)) -> $N from $ranks ranks" "$T/$name-lead.log" ||
			fail "$name: the lead did not merge version $N from $ranks ranks"
		echo "$name: ok - parameters owned by the ranks (of the model's):" $owned
	fi
	port=$((port + 3))
}

scenario one-rank 1
scenario two-ranks 2
echo "ok - a torch actor on CPU scattered every version's change lists into its own model: bit-exact with the trainer's BF16 parameters and outputs, from one trainer rank and from two"
