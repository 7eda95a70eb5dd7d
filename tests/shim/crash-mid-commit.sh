#!/bin/sh
# crash-mid-commit.sh BFPATCH SHIM (set-up in lib.sh):
# crash in the middle of a commit: the buffer says "committing 0 -> 1" and
# the first half of the patch's ranges already hold their target values
# (what a SIGKILL between frames leaves); the restarted shim must finish
# the commit from frames it receives again
set -u
. "$(dirname "$0")/lib.sh"
traj
p01

"$SHIM" $AUTH --buffer "$SHM.x" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 9)) --exit-after 0.2 > /dev/null 2>&1
"$BFP" apply -q "$T/traj/step-0000.safetensors" "$T/p01" -o "$T/s1.safetensors"
python3 - "$SHM.x" "$T/s1.safetensors" "$T/p01" <<'PY' || fail "crash simulation"
import mmap, struct, sys
shm, s1, p = sys.argv[1:4]
t = open(s1, "rb").read()
n = struct.unpack_from("<Q", t)[0]
target = t[8 + n:]
pb = open(p, "rb").read()
ranges, at = [], 0
while at < len(pb):
    begin, rlen, plen = struct.unpack_from("<QII", pb, at + 32)
    ranges.append((begin, rlen))
    at += 60 + plen
with open(shm, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    off = struct.unpack_from("<Q", m, 48)[0]
    struct.pack_into("<II", m, 64 + 4, 1, 1)    # state committing, target 1
    for begin, rlen in ranges[: len(ranges) // 2]:
        m[off + 2 * begin: off + 2 * (begin + rlen)] = target[2 * begin: 2 * (begin + rlen)]
    # and the next frame cut short: the journal (common/wbuf.c undo_slot,
    # slot 0) holds the old values of its changed weights, half of which
    # hold their new values
    begin, rlen = ranges[len(ranges) // 2]
    ch = [i for i in range(rlen) if m[off + 2 * (begin + i): off + 2 * (begin + i) + 2] !=
          target[2 * (begin + i): 2 * (begin + i) + 2]]
    assert len(ch) > 2, "frame without changes"
    j = bytearray(struct.pack("<IIQII", 0, len(ch), begin, 0, 0))  # valid, n, begin, 0, 0
    j += struct.pack("<%dI" % len(ch), *ch) + bytes(4 * (35760 - len(ch)))
    j += b"".join(bytes(m[off + 2 * (begin + i): off + 2 * (begin + i) + 2]) for i in ch)
    with open(shm + ".undo", "r+b") as u:
        u.write(j)
        u.seek(0)
        u.write(struct.pack("<I", 1))  # valid, once the entry is whole
    for i in ch[: len(ch) // 2]:
        m[off + 2 * (begin + i): off + 2 * (begin + i) + 2] = target[2 * (begin + i): 2 * (begin + i) + 2]
    m.flush()
print("simulated a crash after %d of %d frames, and in the middle of the next" %
      (len(ranges) // 2, len(ranges)))
PY
start_shim x --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 9)) \
	--exit-after 40
"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 \
	--steps 1 --linger 2 > "$T/publish2.log" 2>&1 || fail publish
wait_line "committed version 0 -> 1" "$T/shimx.log"
kill -TERM $PIDS; wait; PIDS=""
grep -q "was interrupted; finishing it" "$T/shimx.log" || fail "no recovery message"
grep -q "1 frame(s) cut short by the crash put back at the base" "$T/shimx.log" ||
	fail "the frame cut short was not rolled back from the journal"
grep -q "keyframe resync" "$T/shimx.log" && fail "the interrupted commit ended in a resync"
check_buffers "$T/traj/step-0001.safetensors" "$SHM.x" || fail "recovered buffer"
echo "ok - crash mid-commit recovered (a frame cut short rolled back from the journal)"
