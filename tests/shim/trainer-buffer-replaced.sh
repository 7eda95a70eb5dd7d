#!/bin/sh
# trainer-buffer-replaced.sh BFPATCH SHIM (set-up in lib.sh):
# the trainer's buffer replaced at its path (recreated: a new file): the
# publisher follows it; here the replacement holds version 4, every
# weight of one range one step up (after one at version 2, behind the
# published version 3, which the publisher must say it waits past)
set -u
. "$(dirname "$0")/lib.sh"
traj
make_buffer t "$T/traj/step-0003.safetensors" 3 - # the trainer's buffer, at version 3

start_shim c2 --init "$T/traj/step-0003.safetensors" \
	--upstream 127.0.0.1:$((port + 10)) --listen 127.0.0.1:$((port + 20)) --exit-after 60
buffer_set "$SHM.c2" 3 - # the --init buffer is at 0: call it 3
"$BFP" publish $AUTH --buffer "$SHM.t" --listen 127.0.0.1:$((port + 10)) --wait-subscribers 1 \
	--steps 4 --linger 2 > "$T/publish22.log" 2>&1 &
PUB=$!
wait_line "subscriber" "$T/publish22.log"
# first a buffer at version 2 (a trainer gone back): followed, and said
python3 - "$SHM.t" "$SHM.t.old" <<'PY' || fail "replacing the trainer's buffer (version 2)"
import shutil, struct, sys
shutil.copyfile(sys.argv[1], sys.argv[2])
with open(sys.argv[2], "r+b") as f:
    f.seek(64)
    f.write(struct.pack("<I", 2))
PY
mv "$SHM.t.old" "$SHM.t"
wait_line "the new buffer is at version 2, not past version 3" "$T/publish22.log" ||
	fail "no word of a replaced buffer behind the published version"
python3 - "$SHM.t" "$SHM.t.new" <<'PY' || fail "replacing the trainer's buffer"
import shutil, struct, sys
shutil.copyfile(sys.argv[1], sys.argv[2])
with open(sys.argv[2], "r+b") as f:
    b = bytearray(f.read())
    off = struct.unpack_from("<Q", b, 48)[0]
    for i in range(1000, 3000):
        w = struct.unpack_from("<H", b, off + 2 * i)[0]
        struct.pack_into("<H", b, off + 2 * i, (w + 1) & 0xFFFF if w & 0x7F80 != 0x7F80 else w)
    struct.pack_into("<I", b, 64, 4)
    f.seek(0)
    f.write(b)
PY
mv "$SHM.t.new" "$SHM.t"
wait $PUB || fail "publish --buffer (replaced)"
wait_line "committed version 3 -> 4" "$T/shimc2.log" || fail "the replaced buffer's version was not published"
kill -TERM $PIDS; wait; PIDS=""
grep -q "was replaced; following the new buffer" "$T/publish22.log" || fail "no word of the replaced buffer"
python3 -c "
import hashlib, struct, sys
def data(p):
    b = open(p, 'rb').read()
    off, n = struct.unpack_from('<QQ', b, 48)
    return hashlib.sha256(b[off:off + 2 * n]).digest()
sys.exit(0 if data(sys.argv[1]) == data(sys.argv[2]) else 1)" "$SHM.t" "$SHM.c2" ||
	fail "the actor's buffer differs from the replaced trainer buffer"
echo "ok - a trainer buffer replaced at its path followed (one behind the published version said)"
