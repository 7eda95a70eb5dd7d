#!/bin/sh
# resync-never-goes-back.sh BFPATCH SHIM (set-up in lib.sh):
# a buffer awaiting a keyframe resync at version 3 never goes back: the
# keyframe stream of version 0 (a publisher that has only step 0) is not
# committed
set -u
. "$(dirname "$0")/lib.sh"
traj
make_buffer rs "$T/traj/step-0003.safetensors" 3 2 # RESYNC, at version 3
steps_dir only0 0

start_shim rs --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 16)) \
	--exit-after 30
"$BFP" publish $AUTH --dir "$T/only0" --listen 127.0.0.1:$port > "$T/publish15.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "keyframe stream" "$T/publish15.log" || fail "no keyframe stream for the resyncing shim"
sleep 1
kill -TERM $PIDS; wait; PIDS=""
grep -q "committed" "$T/shimrs.log" && fail "a resync went back to an older version: $(grep committed "$T/shimrs.log")"
python3 -c "
import struct, sys
v, st = struct.unpack_from('<II', open(sys.argv[1], 'rb').read(72), 64)
sys.exit(0 if (v, st) == (3, 2) else 1)" "$SHM.rs" || fail "the resyncing buffer changed"
echo "ok - a resync never goes back"
