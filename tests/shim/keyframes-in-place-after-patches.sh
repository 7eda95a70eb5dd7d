#!/bin/sh
# keyframes-in-place-after-patches.sh BFPATCH SHIM (set-up in lib.sh):
# a keyframe stream larger than --max-stage (1.6 MB, 1.25 MiB) reaches a shim whose
# buffer holds a version (READY, at 0; the publisher resumed at 2 with no
# patch), or one restarted in the middle of a commit whose patch nobody
# holds any more (COMMITTING 0 -> 1): staged, it could never complete;
# once the shim gives up on patches it is written in place
set -u
. "$(dirname "$0")/lib.sh"
traj
steps_dir at2 0 1 2

make_buffer kr "$T/traj/step-0003.safetensors" 0 0 # READY at version 0
make_buffer kc "$T/traj/step-0003.safetensors" 0 1 # COMMITTING, from 0 ...
python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(72); f.write(struct.pack('<I', 1))  # ... to 1" "$SHM.kc"
start_shim kr --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 22)) \
	--max-stage 1310720 --nack-ms 50 --exit-after 60
start_shim kc --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 23)) \
	--max-stage 1310720 --nack-ms 50 --exit-after 60
"$BFP" publish $AUTH --dir "$T/at2" --resume --listen 127.0.0.1:$port > "$T/publish23.log" 2>&1 &
PIDS="$PIDS $!"
for sn in kr kc; do
	wait_line "committed version 0 -> 2 (keyframe resync, written in place)" "$T/shim$sn.log" 300 ||
		fail "shim $sn: a keyframe stream larger than --max-stage never completed: $(tail -n 3 "$T/shim$sn.log")"
done
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0002.safetensors" "$SHM.kr" "$SHM.kc" ||
	fail "large keyframe streams written in place after giving up on patches"
echo "ok - large keyframe streams in place after giving up on patches (READY and COMMITTING)"
