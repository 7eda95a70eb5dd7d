#!/bin/sh
# damaged-buffer-resync.sh BFPATCH SHIM (set-up in lib.sh):
# a buffer that no longer holds its version (a weight overwritten behind
# the shim's back before the patch comes), with safe-point commits so the
# shim prepares while it waits: preparing the frame over that range is
# refused (and the frame fetched again), at most 3 times before the shim
# stops trying; the commit the actor allows fails verification, and a
# keyframe resync ends bit-exact, its frames written into the buffer as
# they come (it holds no version then)
set -u
. "$(dirname "$0")/lib.sh"
traj
p01

start_shim r --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 12)) --commit safe-point --nack-ms 20 --exit-after 40
python3 - "$SHM.r" "$T/p01" "$HERE/../host_shim/python" > "$T/pyr.log" 2>&1 <<'PY' &
import mmap, struct, sys
sys.path.insert(0, sys.argv[3])
from bfpatch_buffer import WeightBuffer
pb = open(sys.argv[2], "rb").read()
begin, rlen = struct.unpack_from("<QI", pb, 32)  # frame 0's range
buf = WeightBuffer(sys.argv[1])
buf._mm[buf.data_offset + 2 * (begin + rlen // 2)] ^= 0x40  # damage version 0
print("damaged", flush=True)
import time
end = time.monotonic() + 30
while buf.staged < 1 and time.monotonic() < end:
    time.sleep(0.01)
assert buf.staged == 1, "version 1 never became complete"
try:
    buf.safe_point(timeout=1)  # this commit fails verification
except TimeoutError:
    pass  # no version in a second: the keyframe resync comes next
v = buf.wait_version(after=0, timeout=30)  # the keyframe resync
assert v == 1 and buf.state == 0, (v, buf.state)
print("version 1 after a resync")
PY
PYR=$!
wait_line "damaged" "$T/pyr.log"
"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 10 > "$T/publish8.log" 2>&1 &
PUB=$!
wait $PYR || { cat "$T/pyr.log"; fail "damaged buffer: $(tail -n 1 "$T/pyr.log")"; }
kill -TERM $PIDS $PUB; wait; PIDS=""
refusals=$(grep -c "frame 0 of version 1 refused" "$T/shimr.log")
[ "$refusals" -ge 1 ] && [ "$refusals" -le 3 ] ||
	fail "the frame over the damaged range was refused $refusals times (want 1 to 3)"
grep -q "failed verification" "$T/shimr.log" || fail "the commit over a damaged buffer did not fail"
# the buffer held no version during the resync: its keyframes were
# written into it as they came (those that came while more waited in the
# socket at the commit), and the commit checked them
sed -n 's/.*(keyframe resync): \([0-9]*\) frames.*, \([0-9]*\) of the frames decoded and verified while staged.*/\1 \2/p' \
	"$T/shimr.log" | { read -r all staged && [ "$staged" -ge 1 ] && [ "$staged" -le "$all" ]; } ||
	fail "the resync's keyframes were not written while staged: $(grep 'keyframe resync' "$T/shimr.log")"
check_buffers "$T/traj/step-0001.safetensors" "$SHM.r" || fail "resync after a damaged buffer"
echo "ok - a damaged buffer: preparation refused at most 3 times, the commit fails verification, resynced bit-exact, its keyframes written as they came"
