#!/bin/sh
# publish-from-buffer.sh BFPATCH SHIM (set-up in lib.sh):
# publishing from a weight buffer (publish --buffer): the trainer's buffer
# is written through the C API (wbuf_begin/wbuf_end), here by a shim fed
# from the checkpoints; a second publisher publishes each version committed
# into it to another shim
set -u
. "$(dirname "$0")/lib.sh"
traj

start_shim t --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 8)) --exit-after 60
start_shim c --init "$T/traj/step-0000.safetensors" \
	--upstream 127.0.0.1:$((port + 10)) --listen 127.0.0.1:$((port + 11)) --exit-after 60
"$BFP" publish $AUTH --buffer "$SHM.t" --listen 127.0.0.1:$((port + 10)) --wait-subscribers 1 \
	--steps 3 --linger 2 > "$T/publish6.log" 2>&1 &
PUB=$!
sleep 1.5
"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
	--linger 1 > "$T/publish7.log" 2>&1 || fail "publish into the trainer's buffer"
wait $PUB || fail "publish --buffer"
wait_line "committed version 2 -> 3" "$T/shimc.log"
kill -TERM $PIDS; wait; PIDS=""
grep -q " -> 3: " "$T/publish6.log" || fail "publish --buffer did not publish version 3"
# a buffer whose header points past its end (the safetensors header's
# length, st_len at byte 40, made 2^40) is refused before anything reads it
cp "$SHM.t" "$SHM.bad"
python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(40); f.write(struct.pack('<Q', 1 << 40))" "$SHM.bad"
"$BFP" publish $AUTH --buffer "$SHM.bad" --listen 127.0.0.1:$port --steps 1 > "$T/publish14.log" 2>&1 &&
	fail "a weight buffer with a bad header was published"
grep -q "not a bfpatch weight buffer (bad header)" "$T/publish14.log" ||
	fail "no clear error for a bad weight buffer header: $(cat "$T/publish14.log")"
check_buffers "$T/traj/step-0003.safetensors" "$SHM.t" "$SHM.c" || fail "publish --buffer"
echo "ok - publishing from a weight buffer; a buffer with a bad header refused"
