#!/bin/sh
# shim_test.sh BFPATCH SHIM: the trainer-to-actor loop on loopback.
# `bfpatch publish` publishes 3 steps of a synthetic trajectory to 4
# `bfpatch-shim` daemons (one loses a frame on purpose and NACKs it; one
# loses the last frame of version 1, the one that tells a streamed patch's
# frame count, and must NACK the patch's tail);
# after every run each weight buffer must equal the trainer's last BF16
# checkpoint, checked by sha256 of the bytes (Python's hashlib), and a
# shim killed in the middle of a commit (a patch, or a keyframe stream)
# finishes it on restart.
set -u
BFP=$1
SHIM=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
test_setup test
# the hugetlbfs case below mounts one and takes huge pages: given back
# however the test ends
HP_MOUNT="" HP_WAS=""
test_teardown() {
	if [ -n "$HP_MOUNT" ]; then
		rm -f "$HP_MOUNT"/*
		umount "$HP_MOUNT"
	fi
	[ -n "$HP_WAS" ] && echo "$HP_WAS" > /proc/sys/vm/nr_hugepages 2>/dev/null
	return 0
}
port=$((20000 + $$ % 20000))
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
# ARGS, logging to $T/shimNAME.log, added to $PIDS; returns once it listens
start_shim() {
	n=$1
	shift
	"$SHIM" --buffer "$SHM.$n" "$@" > "$T/shim$n.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_line "listening on" "$T/shim$n.log" || fail "shim $n did not start"
}

"$BFP" synth -o "$T/traj" -p 2M -n 3 -S 8 2>/dev/null || fail synth
# frames of version 1 (the publisher's frame size is the default, too)
"$BFP" diff -q "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" -o "$T/p01"
n01=$("$BFP" info --json "$T/p01" | python3 -c 'import json, sys; print(json.load(sys.stdin)["frames"])')
for i in 1 2 3 4; do
	drop=""
	[ $i = 3 ] && drop="--drop-every 5"
	[ $i = 4 ] && drop="--drop-every $n01"
	"$SHIM" --buffer "$SHM.$i" --init "$T/traj/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + i)) \
		--exit-after 40 $drop > "$T/shim$i.log" 2>&1 &
	PIDS="$PIDS $!"
done
# shim 2 first gets a forged frame of version 1 (a payload byte changed,
# the CRC made to match): preparing it must refuse it and write nothing,
# and the real frame must take its place
wait_line "listening on" "$T/shim2.log"
python3 - "$T/p01" $((port + 2)) "$HERE" <<'PY' || fail "forging a frame"
import socket, struct, sys
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/relay"]
from kat_check import crc32c
from tap_peers import frames
f = bytearray(frames(sys.argv[1])[3])
f[60 + (len(f) - 60) // 2] ^= 0x10
struct.pack_into("<I", f, 28, 0)  # streamed
struct.pack_into("<I", f, 56, crc32c(bytes(f[60:]), crc32c(bytes(f[:56]))))
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(f, ("127.0.0.1", int(sys.argv[2])))
PY
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 4 \
	--steps 3 --linger 2 > "$T/publish.log" 2>&1 || fail publish
for i in 1 2 3 4; do
	wait_line "committed version 2 -> 3" "$T/shim$i.log"
done
for p in $PIDS; do kill -TERM "$p"; done
wait
PIDS=""
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
check_buffers "$T/traj/step-0003.safetensors" "$SHM.1" "$SHM.2" "$SHM.3" "$SHM.4" || fail "buffers"
grep -q "NACKs [1-9]" "$T/shim3.log" || fail "the lossy shim sent no NACK"
grep -q "NACKs [1-9]" "$T/shim4.log" || fail "the shim that lost the last frame sent no NACK"
grep -q "frame 3 of version 1 refused" "$T/shim2.log" || fail "the forged frame was not refused"
grep -q "prepared while staged [0-9]* (refused 1," "$T/shim2.log" || fail "shim 2's refusals"
grep "bfpatch-shim: version" "$T"/shim*.log | sed 's/.*bfpatch-shim: //'
grep "NACKs answered" "$T/publish.log" | sed 's/.*bfpatch publish: //'

# crash in the middle of a commit: the buffer says "committing 0 -> 1" and
# the first half of the patch's ranges already hold their target values
# (what a SIGKILL between frames leaves); the restarted shim must finish
# the commit from frames it receives again
"$SHIM" --buffer "$SHM.x" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:1 \
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
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 \
	--steps 1 --linger 2 > "$T/publish2.log" 2>&1 || fail publish
wait_line "committed version 0 -> 1" "$T/shimx.log"
kill -TERM $PIDS; wait; PIDS=""
grep -q "was interrupted; finishing it" "$T/shimx.log" || fail "no recovery message"
grep -q "1 frame(s) cut short by the crash put back at the base" "$T/shimx.log" ||
	fail "the frame cut short was not rolled back from the journal"
grep -q "keyframe resync" "$T/shimx.log" && fail "the interrupted commit ended in a resync"
check_buffers "$T/traj/step-0001.safetensors" "$SHM.x" || fail "recovered buffer"

# a late joiner: the publisher is at version 2 and keeps one patch, so a
# shim at version 0 gets a keyframe stream of version 2, then patch 3
mkdir "$T/live"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" \
	"$T/traj/step-0002.safetensors" "$T/live/"
start_shim a --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 5)) --exit-after 40
"$BFP" publish --dir "$T/live" --listen 127.0.0.1:$port --wait-subscribers 1 --keep 1 \
	--steps 3 --linger 2 > "$T/publish3.log" 2>&1 &
PUB=$!
wait_line "committed version 1 -> 2" "$T/shima.log"
start_shim b --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 6)) --exit-after 40
wait_line "keyframe resync" "$T/shimb.log"
cp "$T/traj/step-0003.safetensors" "$T/live/"
wait $PUB || fail "publish (late joiner)"
for f in shima shimb; do
	wait_line "committed version 2 -> 3" "$T/$f.log"
done
kill -TERM $PIDS; wait; PIDS=""
grep -q "committed version 0 -> 2 (keyframe resync)" "$T/shimb.log" || fail "no keyframe resync"
check_buffers "$T/traj/step-0003.safetensors" "$SHM.a" "$SHM.b" || fail "late joiner"

# a keyframe commit cut short (--crash-after: SIGKILL halfway through it):
# the restarted shim has nothing of that stream staged and asks for the
# rest of it (a NACK with the KEY flag; the patch to that version has
# another base), and finishes bit-exact without giving up on NACKs
start_shim cutp --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 39)) --exit-after 40
"$BFP" publish --dir "$T/live" --listen 127.0.0.1:$port --wait-subscribers 1 --keep 1 \
	--steps 3 --linger 15 > "$T/publish10.log" 2>&1 &
PUB=$!
wait_line "committed version 2 -> 3" "$T/shimcutp.log" || fail "publish for the cut keyframe commit"
"$SHIM" --buffer "$SHM.cut" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 38)) --crash-after 1 > "$T/shimcut0.log" 2>&1 &
K=$!
PIDS="$PIDS $K"
for n in $(seq 150); do kill -0 $K 2>/dev/null || break; sleep 0.1; done
grep -q "middle of the commit to version 3" "$T/shimcut0.log" ||
	fail "the late joiner did not die in its keyframe commit"
start_shim cut --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 38)) \
	--events "$T/cut.events" --exit-after 30
wait_line "committed version" "$T/shimcut.log" 150 || fail "the keyframe commit cut short was not finished"
kill -TERM $PIDS $PUB 2>/dev/null; wait; PIDS=""
grep -q "was interrupted; finishing it" "$T/shimcut.log" || fail "no recovery message (keyframe commit)"
grep -q "unrepaired" "$T/shimcut.log" && fail "the restarted shim gave up on its NACKs"
python3 - "$T/cut.events" <<'PY' || fail "the first NACK after the restart did not ask for keyframes"
import json, sys
nacks = [e for e in map(json.loads, open(sys.argv[1])) if e["ev"] == "nack"]
assert nacks and nacks[0]["version"] == 3 and nacks[0]["key"] is True, nacks[:1]
PY
check_buffers "$T/traj/step-0003.safetensors" "$SHM.cut" || fail "keyframe commit finished after a crash"

# a buffer that no longer holds its version (a weight overwritten behind
# the shim's back before the patch comes), with safe-point commits so the
# shim prepares while it waits: preparing the frame over that range is
# refused (and the frame fetched again), at most 3 times before the shim
# stops trying; the commit the actor allows fails verification, and a
# keyframe resync ends bit-exact
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
v = buf.safe_point(timeout=1)  # this commit fails verification
v = buf.wait_version(after=0, timeout=30)  # the keyframe resync
assert v == 1 and buf.state == 0, (v, buf.state)
print("version 1 after a resync")
PY
PYR=$!
wait_line "damaged" "$T/pyr.log"
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 10 > "$T/publish8.log" 2>&1 &
PUB=$!
wait $PYR || { cat "$T/pyr.log"; fail "damaged buffer: $(tail -n 1 "$T/pyr.log")"; }
kill -TERM $PIDS $PUB; wait; PIDS=""
refusals=$(grep -c "frame 0 of version 1 refused" "$T/shimr.log")
[ "$refusals" -ge 1 ] && [ "$refusals" -le 3 ] ||
	fail "the frame over the damaged range was refused $refusals times (want 1 to 3)"
grep -q "failed verification" "$T/shimr.log" || fail "the commit over a damaged buffer did not fail"
check_buffers "$T/traj/step-0001.safetensors" "$SHM.r" || fail "resync after a damaged buffer"

# a staging budget too small for both the frames and their prepared
# changes (an 8M-parameter model, --max-stage 1 MiB): preparation takes at
# most half and gives way, no frame is refused for room, and the version
# commits bit-exact without a resync; the publisher sends encoding 1
# (--sparse-v1, for receivers older than encoding 5), as its history shows
"$BFP" synth -o "$T/big" -p 8M -n 1 -S 9 2>/dev/null || fail "synth 8M"
mkdir -p "$T/hist9"
start_shim m --init "$T/big/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 13)) --max-stage 1048576 --exit-after 30
"$BFP" publish --dir "$T/big" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 --sparse-v1 --history "$T/hist9" > "$T/publish9.log" 2>&1 ||
	fail "publish the 8M model"
wait_line "committed version 0 -> 1" "$T/shimm.log"
# frames in an encoding this build does not read (from a newer publisher):
# dropped and counted, and said once in the log
/usr/bin/python3 - $((port + 13)) "$HERE" <<'PY' || fail "sending frames of an unknown encoding"
import socket, struct, sys
sys.path.insert(0, sys.argv[2])
from kat_check import crc32c
h = struct.pack("<IBBHQIIIIQIIQ", 0x54504642, 1, 200, 0, 1, 0, 1, 0, 1, 0, 1, 2, 0)
payload = b"\x00\x00"
frame = h + struct.pack("<I", crc32c(payload, crc32c(h))) + payload
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    s.sendto(frame, ("127.0.0.1", int(sys.argv[1])))
PY
wait_line "frames in encoding 200" "$T/shimm.log" || fail "an unknown encoding was not reported"
kill -TERM $PIDS; wait; PIDS=""
[ "$(grep -c "frames in encoding 200" "$T/shimm.log")" = 1 ] || fail "an unknown encoding reported more than once"
grep -q "committed version 0 -> 1: " "$T/shimm.log" || fail "small budget: no plain commit"
grep -q "over budget 0)" "$T/shimm.log" || fail "small budget: frames refused for room"
check_buffers "$T/big/step-0001.safetensors" "$SHM.m" || fail "small budget buffer"
"$BFP" info --json "$T/hist9/v00000000-v00000001.bfp" | python3 -c "
import json, sys
f = json.load(sys.stdin)['frames_by_encoding']
sys.exit(0 if f['sparse'] > 0 and f['sparse_encoding1'] == f['sparse'] else 1)" ||
	fail "publish --sparse-v1 did not send encoding 1"

# a step that re-initialises part of a tensor (new random values, as for
# a reset head): the encoder codes those ranges as absolute values, frames
# of the patch marked IN_PATCH (FORMAT.md 2.1); the shim files them with
# the patch and commits it, without a keyframe resync
mkdir "$T/reinit"
cp "$T/traj/step-0000.safetensors" "$T/reinit/"
python3 - "$T/traj/step-0001.safetensors" "$T/reinit/step-0001.safetensors" <<'PY' ||
import json, random, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack_from("<Q", b)[0]
hdr = json.loads(b[8:8 + n])
name, t = max(((k, v) for k, v in hdr.items() if k != "__metadata__" and v["dtype"] == "BF16"),
              key=lambda kv: kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0])
lo, hi = t["data_offsets"]
at = 8 + n + lo + (hi - lo) // 3 // 2 * 2
rnd = random.Random(5)
for i in range(at, at + (hi - lo) // 3 // 2 * 2, 2):
    struct.pack_into("<H", b, i, rnd.getrandbits(16))
open(sys.argv[2], "wb").write(b)
print("re-initialised a third of", name)
PY
	fail "re-initialising a tensor"
"$BFP" diff -q "$T/reinit/step-0000.safetensors" "$T/reinit/step-0001.safetensors" -o "$T/preinit"
"$BFP" info --json "$T/preinit" | python3 -c "
import json, sys
f = json.load(sys.stdin)['frames_by_encoding']
sys.exit(0 if f['keyframe'] + f['keyframe_zstd'] > 0 and f['sparse'] > 0 else 1)" ||
	fail "the re-initialised step made no keyframe-coded frames in its patch"
start_shim k --init "$T/reinit/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 14)) --exit-after 30
"$BFP" publish --dir "$T/reinit" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 > "$T/publish10.log" 2>&1 || fail "publish the re-initialised step"
wait_line "committed version 0 -> 1" "$T/shimk.log" 200 || fail "the re-initialised step was not committed"
kill -TERM $PIDS; wait; PIDS=""
grep -q "committed version 0 -> 1: " "$T/shimk.log" ||
	fail "the patch with keyframe-coded frames was not committed as a patch"
check_buffers "$T/reinit/step-0001.safetensors" "$SHM.k" || fail "re-initialised step"

# jumbo frames, paced: a dense refresh (keyframe streams) in 9000-byte
# frames at 200 Mbit/s; each sendmmsg batch of them is more than 256 KiB
start_shim j --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 15)) --exit-after 30
timeout 30 "$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 \
	--steps 1 --keyframes --frame-size 9000 --rate 200m --linger 1 > "$T/publish11.log" 2>&1 ||
	fail "publish --frame-size 9000 --rate 200m did not finish"
wait_line "committed version 0 -> 1" "$T/shimj.log" || fail "jumbo keyframes not committed"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0001.safetensors" "$SHM.j" || fail "jumbo keyframes"

# a NACK of 128 overlapping ranges (each the whole patch) is answered with
# at most 4096 frames (PROTOCOL.md 2.4), not 128 copies of the patch; the
# same NACK again at once gets what the subscriber's budget refilled
# (--nack-rate 100 frames/s), and another subscriber its own 4096
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 6 --nack-rate 100 > "$T/publish12.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" <<'PY' || fail "NACK amplification"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, frames_for, join, receiver
port = int(sys.argv[1])
s = receiver()
join(s, port, 0)
first = frames_for(s, 20, 1.0)
assert first, "no frames"
model = struct.unpack_from("<Q", first[0], 8)[0]
target = struct.unpack_from("<I", first[0], 20)[0]
n = len(first)
s.sendto(ctl(3, model, target, ranges=[(0, n)] * 128), ("127.0.0.1", port))
again = frames_for(s, 10, 1.0)
want = min(4096, 128 * n)
assert 128 * n > 4096, "patch too small for this check (%d frames)" % n
assert len(again) == want, "one NACK got %d frames back, want %d" % (len(again), want)
t0 = time.monotonic()
s.sendto(ctl(3, model, target, ranges=[(0, n)] * 128), ("127.0.0.1", port))
third = frames_for(s, 10, 1.0)
# 100 frames a second since the budget was spent; the answer was a few
# seconds ago at most
assert 20 <= len(third) <= 600, "a NACK over budget got %d frames" % len(third)
first_s, s = s, receiver()  # another subscriber (the first stays open)
join(s, port, 0)
caught = frames_for(s, 20, 1.0) # the patch, as a catch-up
s.sendto(ctl(3, model, target, ranges=[(0, n)] * 128), ("127.0.0.1", port))
fourth = frames_for(s, 10, 1.0)
assert len(fourth) == want, "another subscriber got %d frames, want %d" % (len(fourth), want)
print("one NACK of 128 x %d frames: %d frames resent; again: %d (budget); another "
      "subscriber: %d" % (n, len(again), len(third), len(fourth)))
PY
wait $PUB || fail "publish (NACK amplification)"
grep -q "[1-9][0-9]* NACKed frames over a subscriber's budget" "$T/publish12.log" ||
	fail "publish: frames over the NACK budget not counted"

# a NACK from a subscriber on a slow link (its JOIN says 2 Mbit/s) is
# answered with about 100 ms of that link (19 frames), not the whole
# patch: the answer is paced at that link and the publisher waits for it
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 6 > "$T/publish47.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" <<'PY' || fail "a NACK answer to a slow link"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, frames_for, join, receiver
port = int(sys.argv[1])
s = receiver()
join(s, port, 0, rate=2000)
first = frames_for(s, 20, 1.0)
n = len(first)
assert n > 40, "patch too small for this check (%d frames)" % n
model = struct.unpack_from("<Q", first[0], 8)[0]
target = struct.unpack_from("<I", first[0], 20)[0]
s.sendto(ctl(3, model, target, ranges=[(0, n)]), ("127.0.0.1", port))
again = frames_for(s, 5, 1.0)
# 100 ms of 2 Mbit/s: 19 frames (10 when it was ten 10 ms slices)
assert 15 <= len(again) <= 25, "a NACK of %d frames from a 2 Mbit/s link got %d back" % (n, len(again))
print("a NACK of %d frames from a 2 Mbit/s link: %d frames back" % (n, len(again)))
PY
wait $PUB || fail "publish (a NACK from a slow link)"

# a buffer awaiting a keyframe resync at version 3 never goes back: the
# keyframe stream of version 0 (a publisher that has only step 0) is not
# committed
cp "$SHM.1" "$SHM.rs"
buffer_set "$SHM.rs" - 2 # RESYNC, at version 3
mkdir "$T/only0"
cp "$T/traj/step-0000.safetensors" "$T/only0/"
start_shim rs --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 16)) \
	--exit-after 30
"$BFP" publish --dir "$T/only0" --listen 127.0.0.1:$port > "$T/publish15.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "keyframe stream" "$T/publish15.log" || fail "no keyframe stream for the resyncing shim"
sleep 1
kill -TERM $PIDS; wait; PIDS=""
grep -q "committed" "$T/shimrs.log" && fail "a resync went back to an older version: $(grep committed "$T/shimrs.log")"
python3 -c "
import struct, sys
v, st = struct.unpack_from('<II', open(sys.argv[1], 'rb').read(72), 64)
sys.exit(0 if (v, st) == (3, 2) else 1)" "$SHM.rs" || fail "the resyncing buffer changed"

# a checkpoint written in place by a trainer that preallocates it (header
# and size right, data still zeros, then the data after a pause): the
# publisher takes it only once the writer closed it
mkdir "$T/inplace"
cp "$T/traj/step-0000.safetensors" "$T/inplace/"
start_shim w --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 17)) --exit-after 30
"$BFP" publish --dir "$T/inplace" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 > "$T/publish16.log" 2>&1 &
PUB=$!
sleep 1
python3 "$HERE/write_in_place.py" "$T/traj/step-0001.safetensors" \
	"$T/inplace/step-0001.safetensors" 1.5 || fail "writing a checkpoint in place"
wait $PUB || fail "publish (a checkpoint written in place)"
wait_line "committed version 0 -> 1" "$T/shimw.log" || fail "the checkpoint written in place was not committed"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0001.safetensors" "$SHM.w" ||
	fail "a checkpoint was published while it was being written"

# a keyframe resync larger than half of --max-stage (a 2M-parameter model,
# 4.4 MB of keyframes, --max-stage 4 MiB; a 7B model at the default 1 GiB):
# written into the buffer as it arrives, a lost frame NACKed, verified
cp "$SHM.1" "$SHM.ip"
buffer_set "$SHM.ip" 0 2 # version 0, RESYNC
mkdir "$T/at2"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" \
	"$T/traj/step-0002.safetensors" "$T/at2/"
start_shim ip --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 18)) \
	--max-stage 4194304 --drop-every 100 --nack-ms 50 --exit-after 30
"$BFP" publish --dir "$T/at2" --resume --listen 127.0.0.1:$port > "$T/publish17.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 0 -> 2 (keyframe resync, written in place)" "$T/shimip.log" 200 ||
	fail "a keyframe resync larger than --max-stage did not finish: $(tail -n 3 "$T/shimip.log")"
kill -TERM $PIDS; wait; PIDS=""
grep -q "NACKs [1-9]" "$T/shimip.log" || fail "the frame lost from the in-place resync was not NACKed"
grep -q "over budget 0)" "$T/shimip.log" || fail "in-place resync: frames refused for room"
check_buffers "$T/traj/step-0002.safetensors" "$SHM.ip" || fail "in-place keyframe resync"

# a checkpoint whose safetensors header differs only in __metadata__ (a
# trainer that records its step there): published, with a warning
mkdir "$T/meta"
cp "$T/traj/step-0000.safetensors" "$T/meta/"
python3 - "$T/traj/step-0001.safetensors" "$T/meta/step-0001.safetensors" <<'PY' ||
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<Q", b)[0]
hdr = json.loads(b[8:8 + n])
hdr["__metadata__"] = {"step": "1", "note": "metadata only"}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
	fail "writing a checkpoint with new metadata"
start_shim md --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 19)) --exit-after 30
"$BFP" publish --dir "$T/meta" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 > "$T/publish21.log" 2>&1 || fail "publish a step with new metadata: $(tail -n 2 "$T/publish21.log")"
wait_line "committed version 0 -> 1" "$T/shimmd.log" || fail "the step with new metadata was not committed"
kill -TERM $PIDS; wait; PIDS=""
grep -q "differs from version 0's beyond the tensor layout" "$T/publish21.log" ||
	fail "no warning about the new metadata"
check_buffers "$T/traj/step-0001.safetensors" "$SHM.md" || fail "step with new metadata"

# a checkpoint directory whose first steps were pruned: the publisher
# starts at the first one there, or with --resume at the latest; an empty
# one is a clear error
mkdir "$T/pruned" "$T/empty"
cp "$T/traj/step-0002.safetensors" "$T/traj/step-0003.safetensors" "$T/pruned/"
"$BFP" publish --dir "$T/pruned" --listen 127.0.0.1:$port --steps 2 --linger 0 \
	> "$T/publish18.log" 2>&1 || fail "publish from a pruned directory: $(cat "$T/publish18.log")"
grep -q "version 2 from $T/pruned" "$T/publish18.log" || fail "did not start at the first step there"
"$BFP" publish --dir "$T/pruned" --resume --listen 127.0.0.1:$port --steps 3 --linger 0 \
	> "$T/publish19.log" 2>&1 || fail "publish --resume from a pruned directory"
grep -q "version 3 from $T/pruned" "$T/publish19.log" || fail "--resume did not start at the latest step"
"$BFP" publish --dir "$T/empty" --listen 127.0.0.1:$port > "$T/publish20.log" 2>&1 &&
	fail "publish from an empty directory succeeded"
grep -q "no checkpoint" "$T/publish20.log" || fail "no clear error for an empty directory"

# a keyframe stream being written in place (buffer in RESYNC) when another
# keyframe stream, staged (streamed frames, count unknown), completes and
# commits version 1: the rest of the in-place stream must not be written
# into the buffer that now holds version 1
"$BFP" diff -q -k --target-version 2 "$T/traj/step-0000.safetensors" \
	"$T/traj/step-0002.safetensors" -o "$T/k2" || fail "keyframes of version 2"
"$BFP" diff -q -k --target-version 1 "$T/traj/step-0000.safetensors" \
	"$T/traj/step-0001.safetensors" -o "$T/k1" || fail "keyframes of version 1"
cp "$SHM.1" "$SHM.ip2"
buffer_set "$SHM.ip2" 0 2 # version 0, RESYNC
start_shim ip2 --upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 21)) \
	--max-stage 4194304 --exit-after 30
python3 - "$T/k2" "$T/k1" $((port + 21)) "$HERE" <<'PY' || fail "sending keyframe streams"
import socket, struct, sys, time
sys.path[:0] = [sys.argv[4], sys.argv[4] + "/relay"]
from kat_check import crc32c
from tap_peers import frames
k2, k1 = frames(sys.argv[1]), frames(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
to = ("127.0.0.1", int(sys.argv[3]))
def send(fs):
    for f in fs:
        s.sendto(f, to)
        time.sleep(0.0002)
send(k2[: len(k2) // 2])          # in place
time.sleep(0.5)
streamed = []
for f in k1:                      # streamed: frame_count 0
    f = bytearray(f)
    struct.pack_into("<I", f, 28, 0)
    struct.pack_into("<I", f, 56, crc32c(bytes(f[60:]), crc32c(bytes(f[:56]))))
    streamed.append(bytes(f))
send(streamed)
time.sleep(1.0)
send(k2[len(k2) // 2:])           # the rest of the in-place stream
time.sleep(0.5)
PY
wait_line "committed version 0 -> 1 (keyframe resync)" "$T/shimip2.log" || fail "the staged keyframe stream was not committed"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0001.safetensors" "$SHM.ip2" ||
	fail "a keyframe stream written in place wrote into a committed version"

# the history keeps the newest --keep patches, and a temporary a killed
# publisher left there is removed at start; with --self-contained its
# sparse frames are of encoding 6, none sharing a model (7-10)
mkdir "$T/hist2"
: > "$T/hist2/v00000005-v00000006.bfp.tmp.Ab12Cd"
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --steps 3 --keep 2 --linger 0 \
	--self-contained --history "$T/hist2" > "$T/publish13.log" 2>&1 ||
	fail "publish --keep 2 --history --self-contained"
[ "$(ls "$T/hist2" | tr '\n' ' ')" = "v00000001-v00000002.bfp v00000002-v00000003.bfp " ] ||
	fail "history --keep 2 holds $(ls "$T/hist2" | tr '\n' ' ')(want the two newest patches)"
grep -q "removed v00000005-v00000006.bfp.tmp.Ab12Cd" "$T/publish13.log" ||
	fail "the leftover temporary was not reported"
e2=$(encodings "$T/hist2")
case " $e2 " in *" 7 "* | *" 8 "* | *" 9 "* | *" 10 "*) fail "publish --self-contained: frames sharing a model ($e2)" ;; esac
case " $e2 " in *" 6 "*) ;; *) fail "publish --self-contained: no frames of encoding 6 ($e2)" ;; esac

# the publisher's history on a full disk (a file size limit: EFBIG, as a
# full disk gives ENOSPC): each patch is reported as not kept, nothing
# partial is left, and publishing goes on; an unwritable one is refused
mkdir "$T/hist"
start_shim h --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 7)) --exit-after 40
sh -c "trap '' XFSZ; ulimit -f 8; exec '$BFP' publish --dir '$T/traj' --listen 127.0.0.1:$port \
	--wait-subscribers 1 --steps 3 --linger 2 --history '$T/hist'" > "$T/publish4.log" 2>&1 ||
	fail "publish with a full history disk"
wait_line "committed version 2 -> 3" "$T/shimh.log"
kill -TERM $PIDS; wait; PIDS=""
[ "$(grep -c 'history not kept' "$T/publish4.log")" = 3 ] || fail "history errors not reported"
grep -q "3 history write errors" "$T/publish4.log" || fail "history errors not counted"
[ -z "$(ls -A "$T/hist")" ] || fail "partial history files left: $(ls -A "$T/hist")"
check_buffers "$T/traj/step-0003.safetensors" "$SHM.h" || fail "publishing stopped on a full disk"
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --history "$T/nonexistent" \
	> "$T/publish5.log" 2>&1 && fail "an unwritable history directory was accepted"
grep -q "history.*No such file" "$T/publish5.log" || fail "no clear error for the history directory"

# publishing from a weight buffer (publish --buffer): the trainer's buffer
# is written through the C API (wbuf_begin/wbuf_end), here by a shim fed
# from the checkpoints; a second publisher publishes each version committed
# into it to another shim
start_shim t --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 8)) --exit-after 60
start_shim c --init "$T/traj/step-0000.safetensors" \
	--upstream 127.0.0.1:$((port + 10)) --listen 127.0.0.1:$((port + 11)) --exit-after 60
"$BFP" publish --buffer "$SHM.t" --listen 127.0.0.1:$((port + 10)) --wait-subscribers 1 \
	--steps 3 --linger 2 > "$T/publish6.log" 2>&1 &
PUB=$!
sleep 1.5
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
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
"$BFP" publish --buffer "$SHM.bad" --listen 127.0.0.1:$port --steps 1 > "$T/publish14.log" 2>&1 &&
	fail "a weight buffer with a bad header was published"
grep -q "not a bfpatch weight buffer (bad header)" "$T/publish14.log" ||
	fail "no clear error for a bad weight buffer header: $(cat "$T/publish14.log")"
check_buffers "$T/traj/step-0003.safetensors" "$SHM.t" "$SHM.c" || fail "publish --buffer"

# the trainer's buffer replaced at its path (recreated: a new file): the
# publisher follows it; here the replacement holds version 4, every
# weight of one range one step up (after one at version 2, behind the
# published version 3, which the publisher must say it waits past)
start_shim c2 --init "$T/traj/step-0003.safetensors" \
	--upstream 127.0.0.1:$((port + 10)) --listen 127.0.0.1:$((port + 20)) --exit-after 60
buffer_set "$SHM.c2" 3 - # the --init buffer is at 0: call it 3
"$BFP" publish --buffer "$SHM.t" --listen 127.0.0.1:$((port + 10)) --wait-subscribers 1 \
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
# a keyframe stream larger than --max-stage (2.3 MB, 2 MiB) reaches a shim whose
# buffer holds a version (READY, at 0; the publisher resumed at 2 with no
# patch), or one restarted in the middle of a commit whose patch nobody
# holds any more (COMMITTING 0 -> 1): staged, it could never complete;
# once the shim gives up on patches it is written in place
cp "$SHM.1" "$SHM.kr"
buffer_set "$SHM.kr" 0 0 # READY at version 0
cp "$SHM.1" "$SHM.kc"
buffer_set "$SHM.kc" 0 1 # COMMITTING, from 0 ...
python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(72); f.write(struct.pack('<I', 1))  # ... to 1" "$SHM.kc"
start_shim kr --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 22)) \
	--max-stage 2097152 --nack-ms 50 --exit-after 60
start_shim kc --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 23)) \
	--max-stage 2097152 --nack-ms 50 --exit-after 60
"$BFP" publish --dir "$T/at2" --resume --listen 127.0.0.1:$port > "$T/publish23.log" 2>&1 &
PIDS="$PIDS $!"
for sn in kr kc; do
	wait_line "committed version 0 -> 2 (keyframe resync, written in place)" "$T/shim$sn.log" 300 ||
		fail "shim $sn: a keyframe stream larger than --max-stage never completed: $(tail -n 3 "$T/shim$sn.log")"
done
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0002.safetensors" "$SHM.kr" "$SHM.kc" ||
	fail "large keyframe streams written in place after giving up on patches"

# a HEARTBEAT from an address other than --upstream (version 5, which
# nobody has) is ignored: believed, the shim asked for version 1 in vain,
# then for keyframe streams after every commit
start_shim hb --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 24)) --nack-ms 50 --exit-after 30
"$BFP" publish --dir "$T/only0" --listen 127.0.0.1:$port > "$T/publish24.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "joined" "$T/publish24.log" || fail "the shim did not join"
python3 - $((port + 24)) "$HERE" <<'PY' || fail "sending a foreign HEARTBEAT"
import socket, sys
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(ctl(4, 0, 5), ("127.0.0.1", int(sys.argv[1])))  # model 0: any
PY
wait_line "HEARTBEAT (version 5) from an address other than --upstream ignored" "$T/shimhb.log" ||
	fail "a foreign HEARTBEAT was not reported"
sleep 2
kill -TERM $PIDS; wait; PIDS=""
grep -q "asking for a keyframe stream" "$T/shimhb.log" &&
	fail "a foreign HEARTBEAT made the shim give up on patches"
grep -q "NACKs 0," "$T/shimhb.log" || fail "a foreign HEARTBEAT made the shim NACK: $(tail -n 1 "$T/shimhb.log")"
grep -q "HEARTBEATs not from --upstream 1" "$T/shimhb.log" || fail "the foreign HEARTBEAT was not counted"

# safe-point commits with four complete patches staged (0 -> 4, every
# slot busy): a keyframe stream of version 1 arriving then is dropped, not
# put in place of the patch 3 -> 4
"$BFP" synth -o "$T/traj5" -p 300k -n 4 -S 9 2>/dev/null || fail "synth (5 steps)"
for i in 0 1 2 3; do
	"$BFP" diff -q -b $i "$T/traj5/step-000$i.safetensors" \
		"$T/traj5/step-000$((i + 1)).safetensors" -o "$T/q$i" || fail "patch $i"
done
"$BFP" diff -q -k --target-version 1 "$T/traj5/step-0000.safetensors" \
	"$T/traj5/step-0001.safetensors" -o "$T/qk1" || fail "keyframes of version 1"
start_shim sp --init "$T/traj5/step-0000.safetensors" --commit safe-point \
	--upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 25)) --exit-after 30
python3 - $((port + 25)) "$HERE" "$T" <<'PY' || fail "sending four patches and keyframes"
import socket, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def send(path):
    for f in frames(path):
        s.sendto(f, ("127.0.0.1", int(sys.argv[1])))
        time.sleep(0.0002)
for i in range(4):
    send(sys.argv[3] + "/q%d" % i)
time.sleep(0.5)
send(sys.argv[3] + "/qk1")
time.sleep(0.5)
PY
python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(92); f.write(struct.pack('<I', 4))  # the actor allows version 4" "$SHM.sp"
wait_line "committed version .* -> 4" "$T/shimsp.log" ||
	fail "a redundant keyframe stream replaced a staged patch: $(grep committed "$T/shimsp.log")"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj5/step-0004.safetensors" "$SHM.sp" || fail "four staged patches"

# safe-point commits: while version 1 is complete and waits for the actor,
# a frame lost from the patch 1 -> 2 is NACKed at once, not only once the
# actor allows version 1 (by then caches may have let it go); and the shim
# JOINs with version 1 (it holds it), so a publisher does not send the
# patch again every 3 s as a catch-up
python3 - "$T" "$HERE" "$SHIM" "$SHM.nl" $((port + 27)) $((port + 28)) <<'PY' || fail "NACKs and JOINs while waiting at a safe point"
import os, socket, struct, subprocess, sys, time
T, here, shim, buf, up, me = sys.argv[1:7]
sys.path.insert(0, here + "/relay")
from tap_peers import frames
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", int(up)))
log = open(T + "/shimnl.log", "w")
p = subprocess.Popen([shim, "--buffer", buf, "--init", T + "/traj5/step-0000.safetensors",
                      "--commit", "safe-point", "--upstream", "127.0.0.1:" + up,
                      "--listen", "127.0.0.1:" + me, "--nack-ms", "50", "--exit-after", "20"],
                     stdout=log, stderr=subprocess.STDOUT)
try:
    u.settimeout(10)
    u.recvfrom(2048)  # its first JOIN: it listens
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    f1 = frames(T + "/q1")
    for f in frames(T + "/q0") + f1[:10] + f1[11:]:
        s.sendto(f, ("127.0.0.1", int(me)))
        time.sleep(0.0002)
    u.settimeout(0.2)
    sent = time.monotonic()
    end, nacked, vs = sent + 4, False, []
    while time.monotonic() < end and not (nacked and len(vs) >= 2):
        try:
            d = u.recv(2048)
        except socket.timeout:
            continue
        v = struct.unpack_from("<I", d, 16)[0]
        nacked |= d[5] == 3 and v == 2
        if d[5] == 1 and time.monotonic() - sent > 0.5:  # JOINs once it staged
            vs.append(v)
    assert nacked, "no NACK of version 2 while version 1 waited for the actor"
    assert vs and all(v == 1 for v in vs), "JOIN versions %s, not 1 (staged)" % vs
finally:
    p.terminate()
    p.wait()
PY
grep -q "version 1 staged" "$T/shimnl.log" || fail "version 1 was not staged: $(cat "$T/shimnl.log")"

# hostile frame counts: four keyframes, each naming a stream of two
# million frames of another version, reserve index arrays of 40 MB each;
# they count against --max-stage (128 MiB), so the fourth is refused
start_shim hs --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 29)) --max-stage 134217728 --exit-after 30
python3 - "$T/qk1" $((port + 29)) "$HERE" <<'PY' || fail "index arrays beyond --max-stage"
import socket, struct, sys, time
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/relay"]
from kat_check import crc32c
from tap_peers import frames
f0 = frames(sys.argv[1])[0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for v in (5, 6, 7, 8):
    f = bytearray(f0)
    struct.pack_into("<II", f, 20, v, 0)          # target version v, index 0
    struct.pack_into("<I", f, 28, 2000000)        # of 2,000,000 frames
    struct.pack_into("<I", f, 56, crc32c(bytes(f[60:]), crc32c(bytes(f[:56]))))
    s.sendto(bytes(f), ("127.0.0.1", int(sys.argv[2])))
    time.sleep(0.3)
PY
kill -TERM $PIDS; wait; PIDS=""
grep -q "ahead 1," "$T/shimhs.log" || fail "a hostile frame count was not refused: $(tail -n 1 "$T/shimhs.log")"
staged=$(sed -n 's/.*staged \([0-9]*\) bytes.*/\1/p' "$T/shimhs.log" | tail -n 1)
[ "$staged" -le 134217728 ] || fail "staged $staged bytes, more than --max-stage"

# datagrams the kernel drops for a full receive buffer (the shim stopped
# while 60,000 arrive) are counted and said (SO_RXQ_OVFL)
start_shim kd --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 30)) --exit-after 30
kd=$(echo $PIDS | awk '{print $NF}')
kill -STOP $kd
python3 - "$T/q0" $((port + 30)) "$HERE" <<'PY' || fail "flooding a stopped shim"
import socket, sys
sys.path.insert(0, sys.argv[3] + "/relay")
from tap_peers import frames
fs = frames(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(60000):
    s.sendto(fs[i % len(fs)], ("127.0.0.1", int(sys.argv[2])))
PY
kill -CONT $kd
sleep 1
# the kernel tells the count with the next datagram it queues
python3 - "$T/q0" $((port + 30)) "$HERE" <<'PY'
import socket, sys
sys.path.insert(0, sys.argv[3] + "/relay")
from tap_peers import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for f in frames(sys.argv[1])[:3]:
    s.sendto(f, ("127.0.0.1", int(sys.argv[2])))
PY
wait_line "the kernel dropped" "$T/shimkd.log" || fail "kernel drops were not said"
kill -TERM $PIDS; wait; PIDS=""
grep -q "dropped by the kernel (socket full) [1-9]" "$T/shimkd.log" ||
	fail "kernel drops were not counted: $(tail -n 1 "$T/shimkd.log")"

# publish --resume while the latest checkpoint is being written in place
# (preallocated: zeros, the right size): it starts at the step before,
# and publishes the latest once it is whole, never its zeros
mkdir "$T/rpre"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/rpre/"
python3 "$HERE/write_in_place.py" "$T/traj/step-0002.safetensors" \
	"$T/rpre/step-0002.safetensors" 3 "$T/rpre.go" &
WR=$!
while [ ! -e "$T/rpre.go" ]; do sleep 0.05; done
start_shim rp --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 31)) --exit-after 40
"$BFP" publish --dir "$T/rpre" --resume --listen 127.0.0.1:$port > "$T/publish31.log" 2>&1 &
PIDS="$PIDS $!"
wait $WR || fail "writing a checkpoint in place"
wait_line "committed version .* -> 2" "$T/shimrp.log" 200 || fail "the latest checkpoint was not published once whole"
kill -TERM $PIDS; wait; PIDS=""
grep -q "not whole yet (still being written); starting at the step before" "$T/publish31.log" ||
	fail "publish --resume did not say it started before a checkpoint being written: $(head -n 3 "$T/publish31.log")"
check_buffers "$T/traj/step-0002.safetensors" "$SHM.rp" ||
	fail "publish --resume published a checkpoint while it was being written"

# a checkpoint directory with a step missing (a trainer that keeps every
# k-th step): the publisher goes on with the next step there (1 -> 3)
mkdir "$T/gap"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" \
	"$T/traj/step-0003.safetensors" "$T/gap/"
start_shim gp --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 32)) --exit-after 40
"$BFP" publish --dir "$T/gap" --listen 127.0.0.1:$port --wait-subscribers 1 > "$T/publish32.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 1 -> 3" "$T/shimgp.log" 200 || fail "a missing step stopped the publisher: $(tail -n 2 "$T/publish32.log")"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0003.safetensors" "$SHM.gp" || fail "a patch over a missing step"

# a weight buffer on hugetlbfs (where files take no write(2) and come in
# whole huge pages): --init makes it through a mapping, its journals are
# whole pages, and three patches commit bit-exact; where no huge pages
# can be had, skipped
hp_was=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo)
[ -n "$hp_was" ] && HP_WAS=$hp_was
if [ -n "$hp_was" ] && mkdir "$T/hp" && echo $((hp_was + 8)) > /proc/sys/vm/nr_hugepages 2>/dev/null &&
	[ "$(cat /proc/sys/vm/nr_hugepages)" -ge $((hp_was + 8)) ] &&
	mount -t hugetlbfs none "$T/hp" 2>/dev/null; then
	HP_MOUNT=$T/hp
	"$SHIM" --buffer "$T/hp/buf" --init "$T/traj5/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 48)) --exit-after 40 \
		> "$T/shimhp.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_line "listening on" "$T/shimhp.log" ||
		fail "a shim on hugetlbfs did not start: $(cat "$T/shimhp.log")"
	"$BFP" publish --dir "$T/traj5" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
		--linger 2 > "$T/publish48.log" 2>&1 || fail "publish to a shim on hugetlbfs"
	wait_line "committed version 2 -> 3" "$T/shimhp.log" || fail "no commits on hugetlbfs"
	kill -TERM $PIDS; wait; PIDS=""
	check_buffers "$T/traj5/step-0003.safetensors" "$T/hp/buf" || fail "a buffer on hugetlbfs"
	test_teardown
	HP_MOUNT="" HP_WAS=""
else
	echo "skip: no hugetlbfs with huge pages here"
	test_teardown
	HP_WAS=""
fi

# a missing step, then a checkpoint of another model (a file that never
# loads as this one), then a good one: the publisher says so, passes over
# both (it used to stop at the first) and publishes 1 -> 4; SIGUSR1
# prints its counters and it goes on
mkdir "$T/gap2"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/gap2/"
cp "$T/traj5/step-0000.safetensors" "$T/gap2/step-0003.safetensors"
cp "$T/traj/step-0003.safetensors" "$T/gap2/step-0004.safetensors"
start_shim g2 --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 45)) --exit-after 40
"$BFP" publish --dir "$T/gap2" --listen 127.0.0.1:$port --wait-subscribers 1 > "$T/publish45.log" 2>&1 &
pub45=$!
PIDS="$PIDS $pub45"
wait_line "committed version 1 -> 4" "$T/shimg2.log" 200 ||
	fail "a missing step and another model's checkpoint stopped the publisher: $(tail -n 3 "$T/publish45.log")"
grep -q "step-0003.safetensors has another tensor layout" "$T/publish45.log" ||
	fail "the other model's checkpoint was not said: $(cat "$T/publish45.log")"
kill -USR1 $pub45
wait_line "at version 4; sent" "$T/publish45.log" 50 || fail "SIGUSR1 printed no counters"
kill -0 $pub45 || fail "SIGUSR1 ended the publisher"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/gap2/step-0004.safetensors" "$SHM.g2" ||
	fail "a patch over a missing step and another model's checkpoint"

# a history kept before the trainer rolled back: step 2 is now another
# run's (traj2), the kept patch 1 -> 2 is not; publish --resume --history
# must not serve it, and a shim at 1 ends at the new step 2
"$BFP" synth -o "$T/trajb" -p 2M -n 2 -S 18 2>/dev/null || fail "synth (another run)"
mkdir "$T/rb" "$T/rbh"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/rb/"
"$BFP" diff -q -b 1 "$T/traj/step-0001.safetensors" "$T/traj/step-0002.safetensors" \
	-o "$T/rbh/v00000001-v00000002.bfp" || fail "the kept patch"
python3 - "$T/traj/step-0001.safetensors" "$T/trajb/step-0002.safetensors" "$T/rb/step-0002.safetensors" <<'PY' || fail "another step 2"
import struct, sys
a = open(sys.argv[1], "rb").read()
b = open(sys.argv[2], "rb").read()
n = struct.unpack_from("<Q", a)[0]
# run A's layout, other weights: step 1 with a block of run B's values
d = bytearray(a)
d[8 + n + 4096:8 + n + 4096 + 200000] = b[8 + n + 4096:8 + n + 4096 + 200000]
open(sys.argv[3], "wb").write(bytes(d))
PY
start_shim rh --init "$T/traj/step-0001.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 33)) --exit-after 40
buffer_set "$SHM.rh" 1 - # the --init buffer is at 0: call it 1
"$BFP" publish --dir "$T/rb" --resume --history "$T/rbh" --listen 127.0.0.1:$port \
	> "$T/publish33.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 1 -> 2" "$T/shimrh.log" 200 || fail "no version 2 after a rollback: $(tail -n 2 "$T/publish33.log")"
kill -TERM $PIDS; wait; PIDS=""
grep -q "the patch to version 2 does not end at checkpoint 2" "$T/publish33.log" ||
	fail "a patch kept from before a rollback was not refused: $(head -n 4 "$T/publish33.log")"
check_buffers "$T/rb/step-0002.safetensors" "$SHM.rh" || fail "a patch kept from before a rollback was served"

# JOINs: one for another model is ignored (said once), and a repeated JOIN
# from the same control port with another data port moves the frames there
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 8 > "$T/publish34.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" "$T/traj/step-0000.safetensors" <<'PY' || fail "JOINs of another model, JOINs that move"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, receiver
port = int(sys.argv[1])
def sock():
    return receiver(timeout=0.2)
def count(s, seconds):
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            n += s.recv(65536)[:4] == b"BFPT"
        except socket.timeout:
            pass
    return n
other = sock()
other.sendto(ctl(1, 0x0123456789ABCDEF, 0, data_port=other.getsockname()[1]), ("127.0.0.1", port))
c, a, b = sock(), sock(), sock()
c.sendto(ctl(1, 0, 0, data_port=a.getsockname()[1]), ("127.0.0.1", port))
assert count(a, 3) > 0, "no frames at the first data port"
c.sendto(ctl(1, 0, 1, data_port=b.getsockname()[1]), ("127.0.0.1", port))
time.sleep(0.3)
count(a, 0.3)  # what was under way
c.sendto(ctl(3, 0, 1, ranges=[(0, 20)]), ("127.0.0.1", port))
got_b, got_a = count(b, 2), count(a, 0.5)
assert got_b > 0 and got_a == 0, "after the second JOIN: %d frames at its port, %d at the first" % (got_b, got_a)
assert count(other, 0.5) == 0, "frames for another model's subscriber"
PY
wait $PUB
grep -q "for model 0123456789abcdef, not this one" "$T/publish34.log" || fail "a JOIN for another model was not said"
grep -q " 1 JOINs for another model" "$T/publish34.log" || fail "a JOIN for another model was not counted"

# publish --resume holding no patch to its version (a publisher killed
# while it published it): it makes the patch from the step before, and a
# subscriber at that step catches up with it, not with a keyframe stream
start_shim mk --init "$T/traj/step-0001.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 35)) --exit-after 30
buffer_set "$SHM.mk" 1 - # the --init buffer is at 0: call it 1
"$BFP" publish --dir "$T/at2" --resume --listen 127.0.0.1:$port > "$T/publish35.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 1 -> 2" "$T/shimmk.log" 200 || fail "no catch-up after a restart: $(tail -n 2 "$T/publish35.log")"
kill -TERM $PIDS; wait; PIDS=""
grep -q "holds patch 1 -> 2, made from the checkpoints" "$T/publish35.log" || fail "the patch to the resumed version was not made"
grep "committed version 1 -> 2" "$T/shimmk.log" | grep -q "keyframe" &&
	fail "a restarted publisher caught a subscriber one step behind up with keyframes"
check_buffers "$T/traj/step-0002.safetensors" "$SHM.mk" || fail "catch-up with a patch made at restart"

# publish --resume after a downtime of two steps (the history holds 0 -> 1,
# the directory goes on to step 3): it makes 1 -> 2 and 2 -> 3 from the
# checkpoints, so a subscriber at 1 catches up with patches, not a
# keyframe stream; a patch file of the history not held (a version past
# the one resumed at, from before a rollback) is removed
mkdir "$T/dt" "$T/dth"
cp "$T/traj/step-000"[0-3].safetensors "$T/dt/"
"$BFP" diff -q -b 0 "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" \
	-o "$T/dth/v00000000-v00000001.bfp" || fail "the kept patch 0 -> 1"
cp "$T/dth/v00000000-v00000001.bfp" "$T/dth/v00000007-v00000008.bfp"
start_shim dt --init "$T/traj/step-0001.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 46)) --exit-after 40
buffer_set "$SHM.dt" 1 - # the --init buffer is at 0: call it 1
"$BFP" publish --dir "$T/dt" --resume --history "$T/dth" --listen 127.0.0.1:$port \
	> "$T/publish46.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version .* -> 3" "$T/shimdt.log" 250 ||
	fail "no catch-up after a downtime of two steps: $(tail -n 3 "$T/publish46.log")"
kill -TERM $PIDS; wait; PIDS=""
for pv in "1 -> 2" "2 -> 3"; do
	grep -q "holds patch $pv, made from the checkpoints" "$T/publish46.log" ||
		fail "patch $pv was not made at restart: $(cat "$T/publish46.log")"
done
grep "committed version" "$T/shimdt.log" | grep -q "keyframe" &&
	fail "a subscriber two steps behind a restarted publisher got a keyframe stream"
[ ! -e "$T/dth/v00000007-v00000008.bfp" ] || fail "a history file not held was left"
[ -e "$T/dth/v00000001-v00000002.bfp" ] && [ -e "$T/dth/v00000002-v00000003.bfp" ] ||
	fail "the patches made at restart were not kept: $(ls "$T/dth")"
check_buffers "$T/traj/step-0003.safetensors" "$SHM.dt" || fail "catch-up after a downtime"

# a keyframe stream to a late joiner (paced at 4 Mbit/s here: seconds)
# does not hold the next version back: its first frames leave while the
# stream goes on, and the stream still arrives whole
mkdir "$T/kcu"
cp "$T/traj/step-0000.safetensors" "$T/kcu/"
"$BFP" publish --dir "$T/kcu" --listen 127.0.0.1:$port --rate 4m --linger 1 \
	> "$T/publish37.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" "$T/traj/step-0001.safetensors" "$T/kcu" <<'PY' || fail "a keyframe stream holding a new version back"
import os, shutil, socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import join, receiver
port = int(sys.argv[1])
s = receiver()
join(s, port, 0xFFFFFFFE)
key, count, patch_at, key_after, end = set(), 0, None, 0, time.monotonic() + 40
while time.monotonic() < end and not (count and len(key) == count and patch_at is not None):
    try:
        d = s.recv(65536)
    except socket.timeout:
        continue
    if d[:4] != b"BFPT":
        continue
    base, target, index, n = struct.unpack_from("<IIII", d, 16)
    if target == 0:  # the keyframe stream of version 0
        if not key:  # it started: the trainer writes step 1
            shutil.copy(sys.argv[3], sys.argv[4] + "/.t")
            os.rename(sys.argv[4] + "/.t", sys.argv[4] + "/step-0001.safetensors")
        key.add(index)
        count = n
        key_after += patch_at is not None
    elif target == 1 and patch_at is None:
        patch_at = len(key)
assert count and len(key) == count, "keyframe stream: %d of %d frames" % (len(key), count)
assert patch_at is not None, "no frame of version 1"
assert key_after > 0, "version 1 left only after the whole keyframe stream (%d frames)" % count
print("version 1 began after %d of the %d keyframes" % (patch_at, count))
PY
kill $PUB 2>/dev/null; wait $PUB 2>/dev/null

# after an idle spell the publisher's first frames leave at line rate only
# up to its token bucket's burst: a sendmmsg batch of 1200-byte frames
# (41 kB), not the 287 kB of a batch of the largest frames, which a
# bottleneck queue on a paced path would have to hold (kernel receive
# times, paced at 8 Mbit/s: by --rate; then by the rate the subscriber's
# JOIN gives, the publisher at its default 1 Gbit/s)
mkdir "$T/kbu"
cp "$T/traj/step-0000.safetensors" "$T/kbu/"
for how in "--rate 8m:0" ":8000"; do
	# shellcheck disable=SC2086 # ${how%:*} is an option and its value, or nothing
	"$BFP" publish --dir "$T/kbu" --listen 127.0.0.1:$port ${how%:*} > "$T/publish38.log" 2>&1 &
	PUB=$!
	python3 - $port "$HERE" "${how#*:}" <<'PY' || fail "the burst after an idle spell (${how%:*}, JOIN rate ${how#*:} kbit/s)"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import join, receiver
port = int(sys.argv[1])
s = receiver(timeout=2)
s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS: kernel receive times
time.sleep(0.5)  # the bucket fills while idle
join(s, port, 0xFFFFFFFE, rate=int(sys.argv[3]))
got = []
while True:
    try:
        d, anc, _, _ = s.recvmsg(65536, 64)
    except socket.timeout:
        break
    if d[:4] != b"BFPT":
        continue
    sec, ns = struct.unpack("qq", anc[0][2][:16])
    got.append((sec + ns * 1e-9, len(d) + 42))
assert len(got) > 1000, "%d frames" % len(got)
t0 = got[0][0]
first = sum(n for t, n in got if t - t0 < 0.010)
total = sum(n for t, n in got)
rate = total / (got[-1][0] - t0)
assert first < 100000, "%d bytes within 10 ms of the first frame" % first
assert 0.7e6 < rate < 1.3e6, "paced at %.0f B/s, not 1 MB/s" % rate
print("burst after idle: %d bytes within 10 ms, then %.2f MB/s" % (first, rate / 1e6))
PY
	kill $PUB 2>/dev/null; wait $PUB 2>/dev/null
done

# a shim resyncing through a keyframe stream paced at 2 Mbit/s NACKs the
# frames it has not had yet while the stream goes on: those not yet sent
# are not answered (they come anyway), so the stream is sent about once
"$SHIM" --buffer "$SHM.rs" --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 37)) --exit-after 0.2 > /dev/null 2>&1
buffer_set "$SHM.rs" 0 2 # RESYNC: no usable version
"$BFP" publish --dir "$T/kbu" --listen 127.0.0.1:$port --rate 2m > "$T/publish40.log" 2>&1 &
PUB=$!
start_shim rs --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 37)) --nack-ms 50 --exit-after 60
wait_line "committed version 0 -> 0 (keyframe resync)" "$T/shimrs.log" 200 ||
	fail "the resyncing shim did not commit its keyframe stream"
kill $PUB 2>/dev/null; wait $PUB 2>/dev/null
kill -TERM $PIDS; wait; PIDS=""
sent=$(sed -n 's/.*; sent \([0-9]*\) frames.*/\1/p' "$T/publish40.log")
[ -n "$sent" ] && [ "$sent" -lt 2100 ] ||
	fail "a 1977-frame keyframe stream took $sent frames with NACKs during it: $(tail -n 1 "$T/publish40.log")"
echo "keyframe resync with NACKs during the stream: $sent frames sent for 1977"

# a subscriber that LEAVEs and JOINs again for keyframes right after its
# keyframe stream gets the next one only once 3 s have passed since the
# first, as if it had stayed (each stream is the whole model)
"$BFP" publish --dir "$T/kbu" --listen 127.0.0.1:$port > "$T/publish39.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" <<'PY' || fail "LEAVE and JOIN again for another keyframe stream"
import socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, join, receiver
port = int(sys.argv[1])
s = receiver(timeout=0.05)
def stream(until):
    """frames of keyframe streams received until then (or 0.3 s after the
    last one), and when the last came"""
    n, last = 0, None
    while time.monotonic() < until and not (last and time.monotonic() - last > 0.3):
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        if d[:4] == b"BFPT":
            n, last = n + 1, time.monotonic()
    return n, last
time.sleep(0.3)
join(s, port, 0xFFFFFFFE)
n1, end1 = stream(time.monotonic() + 5)
assert n1 > 1000 and end1, "first keyframe stream: %d frames" % n1
s.sendto(ctl(2, 0, 0), ("127.0.0.1", port))  # LEAVE
join(s, port, 0xFFFFFFFE)                    # and JOIN again at once
n2, _ = stream(time.monotonic() + 1.0)
assert n2 == 0, "%d frames of another keyframe stream right after LEAVE and JOIN" % n2
for k in range(5):  # JOINs every second, as a shim sends them
    join(s, port, 0xFFFFFFFE)
    n3, _ = stream(time.monotonic() + 1.0)
    if n3:
        break
assert n3 > 0, "no keyframe stream once 3 s had passed"
print("after LEAVE and JOIN: none at once, the next %.1f s after the first" %
      (time.monotonic() - end1))
PY
kill $PUB 2>/dev/null; wait $PUB 2>/dev/null

# --linger ends a finite run also while subscribers keep coming: the
# catch-ups begun by then are finished (a keyframe stream paced at the
# 8 Mbit/s its subscriber's JOIN asks for: seconds), and no new one is
# begun (a new subscriber every 1.5 s here)
mkdir "$T/lg"
cp "$T/traj/step-0000.safetensors" "$T/traj/step-0001.safetensors" "$T/lg/"
"$BFP" publish --dir "$T/lg" --listen 127.0.0.1:$port --steps 1 --linger 1 \
	> "$T/publish41.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" "$T/publish41.log" <<'PY' || fail "--linger with subscribers that keep coming"
import sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import join, receiver
port, log = int(sys.argv[1]), sys.argv[3]
t0, subs = time.monotonic(), []
def ended():
    return "; sent " in open(log).read()  # the publisher's last line
while not ended() and time.monotonic() - t0 < 16:
    if time.monotonic() - t0 >= 1.5 * len(subs):
        s = receiver()
        join(s, port, 0xFFFFFFFE, rate=8000)
        subs.append(s)
    time.sleep(0.05)
took = time.monotonic() - t0
assert ended() and took < 10, \
    "the publisher ran for %.1f s with --linger 1 (%d subscribers came)" % (took, len(subs))
print("--linger 1: the publisher ended after %.1f s, %d subscribers having come" %
      (took, len(subs)))
PY
wait $PUB
grep -q "keyframe stream of version 1" "$T/publish41.log" || fail "no catch-up before --linger ended"

# a NACK that comes while its version is still being sent (paced at
# 20 kB/s here) is answered from the frames already sent, not dropped
mkdir "$T/midst"
cp "$T/traj/step-0000.safetensors" "$T/midst/"
"$BFP" publish --dir "$T/midst" --listen 127.0.0.1:$port --rate 160k --linger 2 \
	> "$T/publish36.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" "$T/traj/step-0001.safetensors" "$T/midst" <<'PY' || fail "a NACK during the stream"
import os, shutil, socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, join, receiver
port = int(sys.argv[1])
s = receiver(8 << 20)
join(s, port, 0)
time.sleep(0.5)
shutil.copy(sys.argv[3], sys.argv[4] + "/.t")
os.rename(sys.argv[4] + "/.t", sys.argv[4] + "/step-0001.safetensors")
seen, again, nacked, last = set(), 0, False, time.monotonic() + 30
while time.monotonic() < last:
    try:
        d = s.recv(65536)
    except socket.timeout:
        continue
    if d[:4] != b"BFPT" or struct.unpack_from("<I", d, 20)[0] != 1:
        continue
    i = struct.unpack_from("<I", d, 24)[0]
    if i in seen:
        again += i < 10
    seen.add(i)
    if len(seen) == 12 and not nacked:
        s.sendto(ctl(3, 0, 1, ranges=[(0, 10)]), ("127.0.0.1", port))
        nacked = True
    if again >= 10:
        break
assert nacked, "the stream was too short to NACK during it (%d frames)" % len(seen)
assert again >= 10, "%d of the 10 frames NACKed during the stream came again" % again
PY
kill $PUB 2>/dev/null; wait $PUB 2>/dev/null

# every slot holds part of a keyframe stream (versions 1-4, the first half
# of each, never repaired): a whole keyframe stream of version 5 must
# still get a slot, in place of the one leading least far, and commit
for v in 1 2 3 4; do
	"$BFP" diff -q -k --target-version $v "$T/traj5/step-0000.safetensors" \
		"$T/traj5/step-000$v.safetensors" -o "$T/qk$v" || fail "keyframes of version $v"
done
"$BFP" diff -q -k --target-version 5 "$T/traj5/step-0000.safetensors" \
	"$T/traj5/step-0004.safetensors" -o "$T/qk5" || fail "keyframes of version 5"
start_shim pk --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 36)) --exit-after 30
python3 - $((port + 36)) "$HERE" "$T" <<'PY' || fail "sending parts of keyframe streams"
import socket, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def send(fr):
    for f in fr:
        s.sendto(f, ("127.0.0.1", int(sys.argv[1])))
        time.sleep(0.0002)
for v in range(1, 5):
    fr = frames(sys.argv[3] + "/qk%d" % v)
    send(fr[:len(fr) // 2])
time.sleep(0.3)
send(frames(sys.argv[3] + "/qk5"))
PY
wait_line "committed version 0 -> 5" "$T/shimpk.log" ||
	fail "four parts of keyframe streams kept a whole one out: $(tail -n 3 "$T/shimpk.log")"
kill -TERM $PIDS; wait; PIDS=""
cp "$T/traj5/step-0004.safetensors" "$T/step-0005.safetensors" # its data, version 5
check_buffers "$T/step-0005.safetensors" "$SHM.pk" || fail "the keyframe stream of version 5"

# a buffer waiting for a keyframe resync (RESYNC, as after a failed
# verification): half of a keyframe stream that nobody repairs is NACKed
# until the shim gives up on it, which is no second resync (it is at one
# already), and the rest of the stream then commits
"$SHIM" --buffer "$SHM.rq" --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:1 \
	--listen 127.0.0.1:$((port + 40)) --exit-after 0.2 > /dev/null 2>&1
buffer_set "$SHM.rq" 0 2
start_shim rq --upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 40)) --nack-ms 20 \
	--exit-after 30
python3 - $((port + 40)) "$HERE" "$T" <<'PY' || fail "half a keyframe stream, then the rest"
import socket, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import frames
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fr = frames(sys.argv[3] + "/qk1")
def send(part):
    for f in part:
        s.sendto(f, ("127.0.0.1", int(sys.argv[1])))
        time.sleep(0.0002)
send(fr[:len(fr) // 2])
end = time.monotonic() + 20
while "unrepaired after" not in open(sys.argv[3] + "/shimrq.log").read():
    assert time.monotonic() < end, "the shim never gave up on the keyframe stream's NACKs"
    time.sleep(0.1)
send(fr[len(fr) // 2:])
PY
wait_line "committed version 0 -> 1" "$T/shimrq.log" || fail "the keyframe stream after giving up"
kill -TERM $PIDS; wait; PIDS=""
grep -q "resyncs 0," "$T/shimrq.log" ||
	fail "giving up on a keyframe stream in RESYNC counted as a resync: $(grep -o 'resyncs [0-9]*' "$T/shimrq.log")"
check_buffers "$T/traj5/step-0001.safetensors" "$SHM.rq" || fail "the keyframe stream after giving up"

# a crash inside wbuf_end, after the version was published and before
# the sequence counter went even (READY with an odd count): readers would
# wait for ever; the restarted shim makes it even
cp "$SHM.sp" "$SHM.sq"
python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(80); n = struct.unpack('<Q', f.read(8))[0]
    f.seek(80); f.write(struct.pack('<Q', n | 1))" "$SHM.sq"
"$SHIM" --buffer "$SHM.sq" --upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 26)) \
	--exit-after 0.5 > "$T/shimsq.log" 2>&1 || fail "shim on a buffer with an odd sequence count"
python3 -c "
import struct, sys
b = open(sys.argv[1], 'rb').read(88)
st, seq = struct.unpack_from('<I', b, 68)[0], struct.unpack_from('<Q', b, 80)[0]
sys.exit(0 if st == 0 and seq % 2 == 0 else 1)" "$SHM.sq" ||
	fail "the sequence count of a published version stayed odd"
grep -q "died before it told readers" "$T/shimsq.log" || fail "the repair was not logged"

# patches whose sparse frames share a model (the default, FORMAT.md
# 3.10): one shim loses the first frame of version 1 that carries a
# model; the frames that refer to it wait for it (none is refused), a NACK
# fetches it, and every version commits bit-exact, as on the shim that
# lost nothing; the history holds frames of encodings 9 and 10
m01=$(python3 -c "
import struct, sys
d = open(sys.argv[1], 'rb').read(); at = i = 0
while d[at + 5] != 9:
    at += 60 + struct.unpack_from('<I', d, at + 44)[0]; i += 1
print(i)" "$T/p01") || fail "the patch has no frame that carries a model"
mkdir -p "$T/histm"
start_shim ma --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 41)) --exit-after 30 --drop-every $((m01 + 1))
start_shim mb --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 42)) --exit-after 30
"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:$port --wait-subscribers 2 --steps 3 \
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
*" 9 10 "*) ;;
*) fail "the history holds no frames of encodings 9 and 10: $(encodings "$T/histm")" ;;
esac

echo "ok - publish -> 4 shims bit-exact over 3 steps, NACK repair (a lost frame; a lost last frame of a streamed patch), a forged frame refused before commit, a damaged buffer resynced, a small staging budget shared with prepared changes, crash mid-commit recovered, late joiner via keyframes (its keyframe commit cut short, finished from the rest of the stream), history on a full disk reported without stopping, publishing from a weight buffer, a patch with keyframe-coded frames (a re-initialised tensor), jumbo paced keyframe streams, NACK answers capped, history keeps the newest patches, a resync never goes back, a checkpoint written in place taken once closed, a keyframe resync larger than --max-stage written in place, pruned checkpoint directories, new __metadata__, a trainer buffer replaced at its path, an in-place resync stopped by a committed version, large keyframe streams in place after giving up on patches (READY and COMMITTING), a foreign HEARTBEAT ignored, a redundant keyframe stream never evicts a staged patch, NACKs while a version waits at a safe point, hostile frame counts held to --max-stage, kernel socket drops counted, publish --resume past a checkpoint being written, a missing step skipped, a patch kept from before a rollback refused, JOINs of another model ignored and repeated JOINs followed, a restarted publisher catching up with a patch it made, a NACK answered while its version streams, parts of keyframe streams in every slot not keeping a whole one out, giving up on a keyframe stream in RESYNC not counted as another resync, a keyframe stream not holding a new version back, a small burst after an idle spell (paced by --rate, and by a JOIN's rate), LEAVE and JOIN again not buying a keyframe stream, --linger ending while subscribers keep coming, NACKs during a keyframe stream not resending what is still to come, an odd sequence count repaired, patches whose frames share a model (the frame carrying one lost and repaired), --self-contained frames"
