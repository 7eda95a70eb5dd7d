# lib.sh: what the publisher/shim scenarios (tests/shim/*.sh BFPATCH SHIM)
# share. Each scenario is one meson test that runs alone: it sources this
# after `set -u`, makes the fixtures it needs (cheap: synthetic
# trajectories of 0.3M and 2M parameters take well under a second) and
# ends every process it started, and its files, however it ends.
#
# Sets BFP and SHIM (the scenario's arguments), HERE (tests/, where the
# Python helpers are), $port (the publisher's UDP port on 127.0.0.1; the
# shims listen on $port + 1 to + 49, so two scenarios may share ports:
# their tests are not run in parallel), and through test_setup
# (test_lib.sh) $T, $SHM (a prefix for weight buffers: $SHM.NAME), $PIDS
# and the EXIT trap that stops $PIDS and $PUB, runs test_teardown and
# removes $T and $SHM*.
#
# $AUTH is what the scenario passes to every publisher and shim it
# starts: --key with $T/key, a key `bfpatch keygen` made, unless the
# scenario set AUTH=--insecure before sourcing this (one that sends
# unsigned datagrams of its own: the keyless path).
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")/.." && pwd)
. "$HERE/test_lib.sh"
test_setup shim
port=$((20000 + $$ % 20000))
"$BFP" keygen "$T/key" 2>/dev/null || fail "bfpatch keygen"
AUTH=${AUTH:---key $T/key}

# buffer_set FILE VERSION STATE: write a weight buffer's header version
# (offset 64) and state (offset 68, common/wbuf.h); - leaves one as is
buffer_set() {
	python3 - "$@" <<'PY' || fail "buffer_set $*"
import struct, sys
with open(sys.argv[1], "r+b") as f:
    for off, v in ((64, sys.argv[2]), (68, sys.argv[3])):
        if v != "-":
            f.seek(off)
            f.write(struct.pack("<I", int(v)))
PY
}

# start_shim NAME ARGS...: bfpatch-shim on the weight buffer $SHM.NAME with
# $AUTH and ARGS, logging to $T/shimNAME.log, added to $PIDS; returns once it listens
start_shim() {
	shim_name=$1
	shift
	"$SHIM" $AUTH --buffer "$SHM.$shim_name" "$@" > "$T/shim$shim_name.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_line "listening on" "$T/shim$shim_name.log" || fail "shim $shim_name did not start"
}

# make_buffer NAME CHECKPOINT VERSION STATE: a weight buffer $SHM.NAME
# that holds CHECKPOINT's weights (made by a shim's --init, which then
# exits), its header then set to VERSION and STATE (buffer_set)
make_buffer() {
	"$SHIM" $AUTH --buffer "$SHM.$1" --init "$2" --upstream 127.0.0.1:1 \
		--listen 127.0.0.1:$((port + 49)) --exit-after 0.2 > "$T/make$1.out" 2>&1 ||
		fail "making buffer $1: $(cat "$T/make$1.out")"
	buffer_set "$SHM.$1" "$3" "$4"
}

check_buffers() { python3 "$HERE/check_buffers.py" "$@"; }

# encodings DIR: the encoding ids of the frames of the patch files in DIR,
# each once, in order, on one line
encodings() {
	python3 - "$1" <<'PY'
import os, struct, sys
encs = set()
for f in os.listdir(sys.argv[1]):
    d = open(os.path.join(sys.argv[1], f), "rb").read(); at = 0
    while at < len(d):
        encs.add(d[at + 5]); at += 60 + struct.unpack_from("<I", d, at + 44)[0]
print(*sorted(encs))
PY
}

# Fixtures.
# traj: $T/traj, steps 0-3 of a 2M-parameter model (2.2 MB checkpoints:
# patches of tens of frames, a keyframe stream of 1977)
traj() { "$BFP" synth -o "$T/traj" -p 2M -n 3 -S 8 2>/dev/null || fail synth; }
# p01: $T/p01, the patch from $T/traj's step 0 to step 1
p01() {
	"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" \
		-o "$T/p01" || fail "the patch 0 -> 1"
}
# steps_dir DIR N...: a checkpoint directory $T/DIR with steps N... of $T/traj
steps_dir() {
	d=$1
	shift
	mkdir "$T/$d" || fail "mkdir $d"
	for s in "$@"; do
		cp "$T/traj/step-000$s.safetensors" "$T/$d/" || fail "step $s into $d"
	done
}
# traj5: $T/traj5, steps 0-4 of a 300k-parameter model
traj5() { "$BFP" synth -o "$T/traj5" -p 300k -n 4 -S 9 2>/dev/null || fail "synth (5 steps)"; }
# traj5_patches N...: $T/qN, the patch from $T/traj5's step N to N + 1
traj5_patches() {
	for i in "$@"; do
		"$BFP" diff -q -b $i "$T/traj5/step-000$i.safetensors" \
			"$T/traj5/step-000$((i + 1)).safetensors" -o "$T/q$i" || fail "patch $i"
	done
}
# traj5_keyframes V...: $T/qkV, keyframes of $T/traj5's step V as version V
traj5_keyframes() {
	for v in "$@"; do
		"$BFP" diff -q -k --target-version $v "$T/traj5/step-0000.safetensors" \
			"$T/traj5/step-000$v.safetensors" -o "$T/qk$v" || fail "keyframes of version $v"
	done
}
