#!/bin/sh
# shared-model-frames.sh BFPATCH SHIM (set-up in lib.sh):
# patches whose sparse frames share a model (the default, FORMAT.md
# 3.6): one shim loses the first frame of version 1 that carries a
# model; the frames that refer to it wait for it (none is refused), a NACK
# fetches it, and every version commits bit-exact, as on the shim that
# lost nothing; the history holds frames of encodings 5 and 6
set -u
. "$(dirname "$0")/lib.sh"
traj
p01

m01=$(python3 -c "
import struct, sys
d = open(sys.argv[1], 'rb').read(); at = i = 0
while d[at + 5] != 5:
    at += 60 + struct.unpack_from('<I', d, at + 44)[0]; i += 1
print(i)" "$T/p01") || fail "the patch has no frame that carries a model"
mkdir -p "$T/histm"
start_shim ma --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 41)) --exit-after 30 --drop-every $((m01 + 1))
start_shim mb --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 42)) --exit-after 30
"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 2 --steps 3 \
	--linger 2 --history "$T/histm" > "$T/publishm.log" 2>&1 ||
	fail "publish patches with models"
for n in ma mb; do
	wait_line "committed version 2 -> 3" "$T/shim$n.log" || fail "shim $n: patches with models not committed"
done
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0003.safetensors" "$SHM.ma" "$SHM.mb" || fail "patches with models"
grep -q "NACKs [1-9]" "$T/shimma.log" || fail "the shim that lost a model's frame sent no NACK"
grep -q "(refused 0," "$T/shimma.log" || fail "frames waiting for their model were refused"
grep -q "bad 0," "$T/shimma.log" || fail "frames waiting for their model were counted bad"
case " $(encodings "$T/histm") " in
*" 5 6 "*) ;;
*) fail "the history holds no frames of encodings 5 and 6: $(encodings "$T/histm")" ;;
esac
echo "ok - patches whose frames share a model (the frame carrying one lost and repaired)"
