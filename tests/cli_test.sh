#!/bin/sh
# cli_test.sh BFPATCH: end-to-end tests of the command-line tool.
# Round trips are checked with cmp and sha256sum (independent of the
# codec); failures must exit non-zero and leave no output file behind.
set -u
BFP=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
T=$(mktemp -d)
trap 'umount "$T/rofs" "$T/full" 2>/dev/null; chmod -R u+w "$T" 2>/dev/null; rm -rf "$T" /dev/shm/bfpcli$$*' EXIT

"$BFP" synth -o "$T/traj" -p 300k -n 2 -S 3 2>/dev/null || { echo "synth failed"; exit 1; }
S0=$T/traj/step-0000.safetensors S1=$T/traj/step-0001.safetensors S2=$T/traj/step-0002.safetensors

# the generator is deterministic from its seed, and RL-like at lr 1e-6:
# ~1-4% of parameters change per step, most by exactly one BF16 step
"$BFP" synth -o "$T/traj2" -p 300k -n 2 -S 3 2>/dev/null
check "synth is deterministic from the seed" "cmp -s '$S2' '$T/traj2/step-0002.safetensors'"
"$BFP" synth -o "$T/traj3" -p 300k -n 1 -S 4 2>/dev/null
check "another seed gives other weights" "! cmp -s '$S1' '$T/traj3/step-0001.safetensors'"
check "synth at lr 1e-6: 0.5-5% changed, >75% of changes are one step" "python3 - '$S1' '$S2' <<'EOF'
import array, struct, sys
def load(p):
    d = open(p, 'rb').read(); n = struct.unpack_from('<Q', d)[0]
    x = array.array('H'); x.frombytes(d[8 + n:]); return x
a, b = load(sys.argv[1]), load(sys.argv[2])
key = lambda x: (~x & 0xFFFF) if x & 0x8000 else (x | 0x8000)
ch = [((key(y) - key(x)) & 0xFFFF) for x, y in zip(a, b) if x != y]
one = sum(1 for d in ch if d in (1, 0xFFFF))
frac = len(ch) / len(a)
print('changed %.2f%%, one step %.1f%%' % (100 * frac, 100 * one / len(ch)))
sys.exit(0 if 0.005 < frac < 0.05 and one > 0.75 * len(ch) else 1)
EOF"

# safetensors round trip, verified by byte compare and sha256
"$BFP" diff -q "$S0" "$S1" -o "$T/p01" && "$BFP" apply -q "$S0" "$T/p01" -o "$T/out1.safetensors"
check "diff/apply safetensors reproduces NEW byte for byte" "cmp -s '$T/out1.safetensors' '$S1'"
check "sha256 of applied equals sha256 of NEW" \
	"[ \"\$(sha256sum < '$T/out1.safetensors')\" = \"\$(sha256sum < '$S1')\" ]"
"$BFP" diff -q -b 1 "$S1" "$S2" -o "$T/p12" && "$BFP" apply -q "$T/out1.safetensors" "$T/p12" -o "$T/out2.safetensors"
check "chained patches reach step 2 exactly" "cmp -s '$T/out2.safetensors' '$S2'"
for fs in 128 1500 9000; do
	"$BFP" diff -q -f -s $fs "$S0" "$S1" -o "$T/pf" && "$BFP" apply -q -f "$S0" "$T/pf" -o "$T/of.safetensors"
	check "frame size $fs round trip" "cmp -s '$T/of.safetensors' '$S1'"
done
"$BFP" diff -q -j 1 "$S0" "$S1" -o "$T/p01j1"
check "output is the same for 1 thread and all threads (canonical)" "cmp -s '$T/p01' '$T/p01j1'"
"$BFP" diff -q --stages "$S0" "$S1" -o "$T/p01s" 2>"$T/stages.txt"
check "diff --stages writes the same patch" "cmp -s '$T/p01' '$T/p01s'"
check "diff --stages prints each stage's share, and ticks a change" \
	"grep -q '^bfpatch diff: stages: gather [0-9.]*%, batch .*, hash [0-9.]*%; rest' '$T/stages.txt' &&
	 { [ \"\$(uname -m)\" != x86_64 ] || grep -q '^bfpatch diff: stages: ticks a change: .*cut [0-9.]* a sized one, write [0-9.]* a written one; [0-9.]* a written change in all' '$T/stages.txt'; }"
"$BFP" diff -q -k --key-encoding raw "$S0" "$S1" -o "$T/key" && "$BFP" apply -q "$S2" "$T/key" -o "$T/ok.safetensors"
check "keyframe patch restores NEW from any base" "cmp -s '$T/ok.safetensors' '$S1'"
# keyframes default to encoding 9 (FORMAT.md 3.12); --key-encoding expm
# keeps to format 1.2's encoding 8, exp to 1.1's encoding 7, raw to 1.0's
# encoding 3 (the encoding bytes read from the frames, and as info counts
# them)
key_encodings() { # PATCH: the set of encodings of its frames, e.g. "3 8"
	python3 -c "
import struct, sys
d = open(sys.argv[1], 'rb').read(); at = 0; e = set()
while at < len(d):
    e.add(d[at + 5]); at += 60 + struct.unpack_from('<I', d, at + 44)[0]
print(*sorted(e))" "$1"
}
"$BFP" diff -q -k "$S0" "$S1" -o "$T/key9" && "$BFP" apply -q "$S2" "$T/key9" -o "$T/ok9.safetensors"
check "keyframe patch by default: encoding 9, restores NEW, smaller than raw keyframes" \
	"cmp -s '$T/ok9.safetensors' '$S1' && [ \$(wc -c < '$T/key9') -lt \$(wc -c < '$T/key') ] &&
	 case \"\$(key_encodings '$T/key9')\" in 9|'3 9') true;; *) false;; esac &&
	 '$BFP' info --json '$T/key9' | grep -q '\"keyframe_huf\": [1-9]' &&
	 '$BFP' info --json '$T/key9' | grep -q '\"keyframe_expm\": 0'"
"$BFP" diff -q -k --key-encoding expm "$S0" "$S1" -o "$T/key8" &&
	"$BFP" apply -q "$S2" "$T/key8" -o "$T/ok8.safetensors"
check "--key-encoding expm: encoding 8 and none of 9 (format 1.2), restores NEW" \
	"cmp -s '$T/ok8.safetensors' '$S1' && [ \$(wc -c < '$T/key8') -lt \$(wc -c < '$T/key') ] &&
	 case \"\$(key_encodings '$T/key8')\" in 8|'3 8') true;; *) false;; esac &&
	 '$BFP' info --json '$T/key8' | grep -q '\"keyframe_expm\": [1-9]' &&
	 '$BFP' info --json '$T/key8' | grep -q '\"keyframe_huf\": 0'"
"$BFP" diff -q -k --key-encoding exp "$S0" "$S1" -o "$T/key7" &&
	"$BFP" apply -q "$S2" "$T/key7" -o "$T/ok7.safetensors"
check "--key-encoding exp: encoding 7 and none of 8 (format 1.1), restores NEW" \
	"cmp -s '$T/ok7.safetensors' '$S1' && [ \$(wc -c < '$T/key7') -lt \$(wc -c < '$T/key') ] &&
	 case \"\$(key_encodings '$T/key7')\" in 7|'3 7') true;; *) false;; esac &&
	 '$BFP' info --json '$T/key7' | grep -q '\"keyframe_exp\": [1-9]' &&
	 '$BFP' info --json '$T/key7' | grep -q '\"keyframe_expm\": 0'"
check "--key-encoding raw: keyframes of encoding 3 only" \
	"[ \"\$(key_encodings '$T/key')\" = 3 ] &&
	 '$BFP' info --json '$T/key' | grep -q '\"keyframe_exp\": 0' &&
	 '$BFP' info --json '$T/key' | grep -q '\"keyframe_expm\": 0' &&
	 '$BFP' info --json '$T/key' | grep -q '\"keyframe_huf\": 0' &&
	 '$BFP' info --json '$T/key' | grep -q '\"keyframe_zstd\": 0'"
check "--key-encoding refuses what it does not know, and writes nothing" \
	"! '$BFP' diff -q -k --key-encoding lz4 '$S0' '$S1' -o '$T/keybad' 2>/dev/null && [ ! -e '$T/keybad' ]"
# by default the sparse frames of each tensor chunk share one model
# (encodings 5 and 6, FORMAT.md 3.6; at 400-byte frames, so that this
# small model's largest tensors have enough changes for one): apply
# reproduces NEW, and info counts the frames that carry a model (read back
# from the encoding bytes)
"$BFP" diff -q -s 400 "$S0" "$S1" -o "$T/p01m" && "$BFP" apply -q "$S0" "$T/p01m" -o "$T/om.safetensors"
"$BFP" info --json "$T/p01m" > "$T/m.json"
check "frames sharing a model: round trip exact, frames of encodings 5 and 6 counted by info" \
	"cmp -s '$T/om.safetensors' '$S1' && python3 -c \"
import json, struct, sys
d = open('$T/p01m', 'rb').read(); at = 0; e = []
while at < len(d):
    e.append(d[at + 5]); at += 60 + struct.unpack_from('<I', d, at + 44)[0]
j = json.load(open('$T/m.json'))['frames_by_encoding']
sys.exit(0 if e.count(5) > 0 and e.count(6) > 0 and j['sparse_with_model'] == e.count(5)
         and j['sparse'] == sum(e.count(k) for k in (1, 5, 6))
         and not set(e) - {1, 2, 3, 4, 5, 6} else 1)
\""

# --self-contained: sparse frames that each decode alone (encoding 1,
# none of 5 or 6), round trip exact, no smaller than the default
"$BFP" diff -q -s 400 --self-contained "$S0" "$S1" -o "$T/p01c" &&
	"$BFP" apply -q "$S0" "$T/p01c" -o "$T/oc.safetensors"
check "--self-contained: round trip exact, encoding 1 and none of 5 or 6, no smaller" \
	"cmp -s '$T/oc.safetensors' '$S1' && [ \$(wc -c < '$T/p01c') -ge \$(wc -c < '$T/p01m') ] && python3 -c \"
import struct, sys
d = open('$T/p01c', 'rb').read(); at = 0; e = []
while at < len(d):
    e.append(d[at + 5]); at += 60 + struct.unpack_from('<I', d, at + 44)[0]
sys.exit(0 if 1 in e and not {5, 6} & set(e) else 1)
\""

"$BFP" diff -q -k --key-encoding zstd "$S0" "$S1" -o "$T/keyz" && "$BFP" apply -q "$S2" "$T/keyz" -o "$T/okz.safetensors"
check "zstd keyframe patch restores NEW and is smaller than raw keyframes" \
	"cmp -s '$T/okz.safetensors' '$S1' && [ \$(wc -c < '$T/keyz') -lt \$(wc -c < '$T/key') ] && '$BFP' info --json '$T/keyz' | grep -q '\"keyframe_zstd\": [1-9]'"

# raw BF16 files (odd lengths, edge values), made by python, compared by cmp
python3 - "$T" <<'EOF'
import os, random, struct, sys
t = sys.argv[1]
r = random.Random(5)
n = 100003
old = [r.getrandbits(16) for _ in range(n)]
new = list(old)
for i in r.sample(range(n), 3000):
    new[i] = r.getrandbits(16)
for i, (a, b) in enumerate([(0x0000, 0x8000), (0x7F80, 0xFF80), (0x7FC1, 0x7FC2), (0x0001, 0x8001), (0x3F7F, 0x3F80)]):
    old[i * 7], new[i * 7] = a, b
open(t + "/old.bin", "wb").write(struct.pack("<%dH" % n, *old))
open(t + "/new.bin", "wb").write(struct.pack("<%dH" % n, *new))
open(t + "/changed.txt", "w").write(str(sum(1 for a, b in zip(old, new) if a != b)))
EOF
"$BFP" diff -q "$T/old.bin" "$T/new.bin" -o "$T/praw" && "$BFP" apply -q "$T/old.bin" "$T/praw" -o "$T/out.bin"
check "raw BF16 round trip" "cmp -s '$T/out.bin' '$T/new.bin'"
"$BFP" info --json "$T/praw" > "$T/info.json"
check "info --json counts the changed parameters (independent count)" \
	"python3 -c \"import json,sys; j=json.load(open('$T/info.json')); sys.exit(0 if j['changed']==int(open('$T/changed.txt').read()) and j['params']==100003 else 1)\""
check "info prints a human summary" "'$BFP' info '$T/praw' | grep -q 'bits per changed'"
check "info --json counts each base-exponent class's changes (independent count from the two files; FORMAT.md 3.3)" \
	"python3 -c \"
import json, struct, sys
j = json.load(open('$T/info.json'))
old = open('$T/old.bin', 'rb').read(); new = open('$T/new.bin', 'rb').read()
n = len(old) // 2
a, b = struct.unpack('<%dH' % n, old), struct.unpack('<%dH' % n, new)
want = [0] * 16
for x, y in zip(a, b):
    if x != y:
        e = (x >> 7) & 0xFF
        want[0 if e <= 108 else 15 if e >= 123 else e - 108] += 1
got = [c['changes'] for c in j['sparse_classes']]
bits = sum(c['model_bits'] + c['position_bits'] + c['value_bits'] for c in j['sparse_classes'])
ok = j['frames_by_encoding']['dense'] == 0 and got == want and 0 < bits <= 8 * j['bytes']
sys.exit(0 if ok else print(got, want) or 1)\""

# failures: clear error, non-zero exit, no output
cp "$T/p01" "$T/corrupt"
printf '\377' | dd of="$T/corrupt" bs=1 seek=700 conv=notrunc 2>/dev/null
expect_fail "corrupt patch is rejected" "$T/x1" "$BFP" apply "$S0" "$T/corrupt" -o "$T/x1"
head -c $(( $(wc -c < "$T/p01") - 5 )) "$T/p01" > "$T/trunc"
expect_fail "truncated patch is rejected" "$T/x2" "$BFP" apply "$S0" "$T/trunc" -o "$T/x2"
head -c $(( $(wc -c < "$T/p01") / 2 )) "$T/p01" > "$T/half"
expect_fail "patch missing frames is rejected" "$T/x2b" "$BFP" apply "$S0" "$T/half" -o "$T/x2b"
expect_fail "patch applied to the wrong base fails verification" "$T/x3" "$BFP" apply "$S1" "$T/p01" -o "$T/x3"
expect_fail "patch for another model is rejected" "$T/x4" "$BFP" apply "$T/old.bin" "$T/p01" -o "$T/x4"
head -c 1000 "$S0" > "$T/short.safetensors"
expect_fail "truncated safetensors base is rejected" "$T/x5" "$BFP" apply "$T/short.safetensors" "$T/p01" -o "$T/x5"
expect_fail "truncated NEW is rejected by diff" "$T/x6" "$BFP" diff "$S0" "$T/short.safetensors" -o "$T/x6"
printf 'abc' > "$T/odd.bin"
expect_fail "odd-sized raw file is rejected" "$T/x7" "$BFP" diff "$T/odd.bin" "$T/odd.bin" -o "$T/x7"
expect_fail "models with different layouts are rejected" "$T/x8" "$BFP" diff "$T/old.bin" "$S0" -o "$T/x8"
expect_fail "missing input file" "$T/x9" "$BFP" diff "$T/nope" "$S0" -o "$T/x9"
# a safetensors file is known by its content too: one with a broken
# header but another name is refused for its header, not read as raw BF16
python3 - "$S0" "$T/broken.weights" <<'EOF2'
import struct, sys
d = open(sys.argv[1], 'rb').read()
n = struct.unpack_from('<Q', d)[0]
hdr = d[8:8 + n].replace(b'"shape"', b'"shapf"', 1)
open(sys.argv[2], 'wb').write(struct.pack('<Q', n) + hdr + d[8 + n:])
EOF2
"$BFP" diff "$T/broken.weights" "$S1" -o "$T/x9b" 2> "$T/broken.err"
check "a broken safetensors header under another name is refused as such" \
	"[ \$? -eq 1 ] && [ ! -e '$T/x9b' ] && grep -q 'broken.weights' '$T/broken.err' &&
	 ! grep -q 'layout' '$T/broken.err'"
expect_fail "output directory missing" "" "$BFP" apply "$S0" "$T/p01" -o "$T/no/such/dir/out"
mkdir "$T/ro" && chmod 0555 "$T/ro"
if [ "$(id -u)" != 0 ]; then
	expect_fail "read-only output directory" "$T/ro/out" "$BFP" apply "$S0" "$T/p01" -o "$T/ro/out"
elif mkdir "$T/rofs" && mount -t tmpfs -o ro,size=1m tmpfs "$T/rofs" 2>/dev/null; then
	# root ignores directory modes: a read-only file system stops it
	expect_fail "read-only file system (apply)" "$T/rofs/out" "$BFP" apply "$S0" "$T/p01" -o "$T/rofs/out"
	expect_fail "read-only file system (publish --history)" "" "$BFP" publish --dir "$T" \
		--listen 127.0.0.1:1 --history "$T/rofs" --insecure
	umount "$T/rofs"
fi
check "no temporary files are left behind" "! ls '$T'/*.tmp.* >/dev/null 2>&1"
# an output it replaces keeps its mode and owner
cp "$S1" "$T/mode.safetensors" && chmod 0600 "$T/mode.safetensors"
[ "$(id -u)" = 0 ] && chown 65534:65534 "$T/mode.safetensors"
before=$(stat -c '%a %u %g' "$T/mode.safetensors")
"$BFP" apply -q -f "$S0" "$T/p01" -o "$T/mode.safetensors"
check "apply over an existing output keeps its mode and owner ($before)" \
	"[ \"\$(stat -c '%a %u %g' '$T/mode.safetensors')\" = '$before' ] &&
	 cmp -s '$T/mode.safetensors' '$S1'"
# temporaries of a killed writer are removed by the next write of that
# output; one a live writer holds (locked) is left alone
head -c 4096 /dev/zero > "$T/stale.bfp.tmp.AbC123"
touch -d '1 hour ago' "$T/stale.bfp.tmp.AbC123"
head -c 4096 /dev/zero > "$T/stale.bfp.tmp.LiVe99"
touch -d '1 hour ago' "$T/stale.bfp.tmp.LiVe99"
python3 -c "
import fcntl, sys, time
f = open(sys.argv[1], 'r+b'); fcntl.lockf(f, fcntl.LOCK_EX)
open(sys.argv[2], 'w').close(); time.sleep(60)" "$T/stale.bfp.tmp.LiVe99" "$T/locked" &
lockpid=$!
i=0; while [ ! -e "$T/locked" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
"$BFP" diff -q "$S0" "$S1" -o "$T/stale.bfp"
check "a killed writer's temporary is removed at the next write, a locked one kept" \
	"[ ! -e '$T/stale.bfp.tmp.AbC123' ] && [ -e '$T/stale.bfp.tmp.LiVe99' ] && [ -s '$T/stale.bfp' ]"
kill $lockpid 2>/dev/null; wait $lockpid 2>/dev/null
rm -f "$T/stale.bfp.tmp.LiVe99"
# disk full: a file size limit makes writes fail with EFBIG, as a full
# disk fails them with ENOSPC; the output must not appear
expect_fail "write error (disk full) leaves no output" "$T/full.safetensors" \
	sh -c "trap '' XFSZ; ulimit -f 4; exec '$BFP' apply '$S0' '$T/p01' -o '$T/full.safetensors'"
expect_fail "diff into a full disk leaves no patch" "$T/fullpatch" \
	sh -c "trap '' XFSZ; ulimit -f 1; exec '$BFP' diff '$S0' '$T/../$(basename $T)/traj/step-0001.safetensors' -o '$T/fullpatch'"

# without the trap: a process killed by SIGXFSZ left its temporary behind
expect_fail "over a file size limit: a write error, no output" "$T/fsz.safetensors" \
	sh -c "ulimit -f 4; exec '$BFP' apply '$S0' '$T/p01' -o '$T/fsz.safetensors'"
check "... and a message that says so" \
	"sh -c \"ulimit -f 4; exec '$BFP' apply '$S0' '$T/p01' -o '$T/fsz2.safetensors'\" 2>&1 | grep -q 'File too large'"
check "no temporary files are left behind (file size limit)" "! ls '$T'/*.tmp.* >/dev/null 2>&1"
# SIGTERM while a file is being written (sent the moment the temporary is
# created, seen through inotify): the temporary goes, exit as killed
mkdir "$T/sig"
check "SIGTERM during a write removes the temporary" "python3 - '$BFP' '$T/sig' <<'EOF'
import ctypes, os, signal, struct, subprocess, sys
bfp, d = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
assert fd >= 0 and libc.inotify_add_watch(fd, d.encode(), 0x100) >= 0  # IN_CREATE
p = subprocess.Popen([bfp, 'synth', '-o', d, '-p', '8M', '-n', '20'],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
seen = None
while seen is None:
    buf, at = os.read(fd, 4096), 0
    while at < len(buf) and seen is None:
        ln = struct.unpack_from('iIII', buf, at)[3]
        name = buf[at + 16:at + 16 + ln].rstrip(bytes(1)).decode()
        at += 16 + ln
        seen = name if '.tmp.' in name else None
p.send_signal(signal.SIGTERM)
assert p.wait() == -signal.SIGTERM
assert not [n for n in os.listdir(d) if '.tmp.' in n], 'a temporary was left'
EOF"

# an output that is an input is refused, the input stays as it was
cp "$S0" "$T/in.safetensors"
expect_fail "diff -o OLD is refused" "" "$BFP" diff -q "$T/in.safetensors" "$S1" -o "$T/in.safetensors"
check "... and OLD is intact" "cmp -s '$T/in.safetensors' '$S0'"
cp "$T/p01" "$T/pin"
expect_fail "apply -o PATCH is refused" "" "$BFP" apply -q "$S0" "$T/pin" -o "$T/pin"
check "... and the patch is intact" "cmp -s '$T/pin' '$T/p01'"
"$BFP" apply -q "$T/in.safetensors" "$T/p01" -o "$T/in.safetensors"
check "apply -o BASE replaces BASE with the new version" "cmp -s '$T/in.safetensors' '$S1'"
# a symbolic link stays a link to the replaced file; a device is written to
ln -s "$T/lt.safetensors" "$T/link.safetensors"
cp "$S0" "$T/lt.safetensors"
"$BFP" apply -q -f "$S0" "$T/p01" -o "$T/link.safetensors"
check "-o through a symbolic link replaces the file it names" \
	"[ -L '$T/link.safetensors' ] && cmp -s '$T/lt.safetensors' '$S1'"
# a link that names a file not made yet (relative, in a subdirectory) gets
# that file; the link stays
mkdir -p "$T/ldir"
ln -s ldir/made.safetensors "$T/dangling.safetensors"
"$BFP" apply -q "$S0" "$T/p01" -o "$T/dangling.safetensors"
check "-o through a link to a file not there yet makes that file" \
	"[ -L '$T/dangling.safetensors' ] && cmp -s '$T/ldir/made.safetensors' '$S1'"
ln -s nodir/x.safetensors "$T/dangling2.safetensors"
expect_fail "-o through a link into a missing directory is refused" "$T/nodir" \
	"$BFP" apply -q "$S0" "$T/p01" -o "$T/dangling2.safetensors"
check "... and the link is left as it was" "[ -L '$T/dangling2.safetensors' ]"
# another user's link to a file not there (planted in /tmp or /dev/shm):
# refused, nothing made where it points
if [ "$(id -u)" = 0 ]; then
	ln -s ldir/planted.safetensors "$T/planted.safetensors"
	chown -h nobody "$T/planted.safetensors"
	expect_fail "-o through another user's link to a file not there is refused" \
		"$T/ldir/planted" "$BFP" apply -q "$S0" "$T/p01" -o "$T/planted.safetensors"
fi
if mknod "$T/null" c 1 3 2>/dev/null; then
	"$BFP" diff -q "$S0" "$S1" -o "$T/null"
	check "-o to a device writes to it and leaves the device node" "[ -c '$T/null' ]"
fi
# (a link of our own to /proc/self/fd/1: a build without the fix renames
# a file over the link, never over the system's /dev/stdout)
ln -s /proc/self/fd/1 "$T/stdout-link"
check "diff -o /dev/stdout writes the patch there" \
	"'$BFP' diff -q '$S0' '$S1' -o '$T/stdout-link' | cmp -s - '$T/p01'"

# an existing output is replaced only with --force (or, for apply, when it
# is BASE: the in-place update above); refused, it is left as it was
cp "$T/p12" "$T/exists.bfp"
expect_fail "diff onto an existing file without --force" "" \
	"$BFP" diff -q "$S0" "$S1" -o "$T/exists.bfp"
check "... says --force replaces it, exits 1, and leaves the file as it was" \
	"grep -q 'exists: give --force' '$T/stderr' && cmp -s '$T/exists.bfp' '$T/p12' &&
	 { '$BFP' diff -q '$S0' '$S1' -o '$T/exists.bfp' 2>/dev/null; [ \$? -eq 1 ]; }"
"$BFP" diff -q --force "$S0" "$S1" -o "$T/exists.bfp"
check "diff --force replaces it" "cmp -s '$T/exists.bfp' '$T/p01'"
cp "$S2" "$T/exists.safetensors"
expect_fail "apply onto an existing file (not BASE) without --force" "" \
	"$BFP" apply -q "$S0" "$T/p01" -o "$T/exists.safetensors"
check "... left it as it was" "cmp -s '$T/exists.safetensors' '$S2'"
"$BFP" apply -q -f "$S0" "$T/p01" -o "$T/exists.safetensors"
check "apply -f replaces it" "cmp -s '$T/exists.safetensors' '$S1'"
cp "$T/p12" "$T/exists.pcap"
expect_fail "pcap onto an existing file without --force" "" \
	"$BFP" pcap "$T/p01" -o "$T/exists.pcap" --dst 198.18.0.1:7400
expect_fail "report onto an existing page without --force" "" \
	"$BFP" report -o "$T/exists.pcap" "$T/p01"
check "pcap and report left it as it was" "cmp -s '$T/exists.pcap' '$T/p12'"
"$BFP" report -f -o "$T/exists.pcap" "$T/p01" && check "report -f replaces it" \
	"grep -q '<html' '$T/exists.pcap'"
"$BFP" synth -o "$T/trajf" -p 300k -n 1 -S 3 2>/dev/null
cp "$T/trajf/step-0001.safetensors" "$T/trajf1.keep"
expect_fail "synth into a directory holding its steps without --force" "" \
	"$BFP" synth -o "$T/trajf" -p 300k -n 1 -S 4
check "... left the steps as they were" "cmp -s '$T/trajf/step-0001.safetensors' '$T/trajf1.keep'"
"$BFP" synth -f -o "$T/trajf" -p 300k -n 1 -S 4 2>/dev/null
check "synth -f replaces them" "! cmp -s '$T/trajf/step-0001.safetensors' '$T/trajf1.keep'"
expect_fail "demo --report onto an existing page, refused at start" "" \
	"$BFP" demo --loopback -p 200k -n 1 --report "$T/exists.pcap"

# - is standard output for a single output file, standard input for one
# input file (a pipe is read into memory first)
check "diff -o - writes the patch to standard output" \
	"'$BFP' diff -q '$S0' '$S1' -o - | cmp -s - '$T/p01'"
check "apply -o - writes the checkpoint to standard output" \
	"'$BFP' apply -q '$S0' '$T/p01' -o - | cmp -s - '$S1'"
"$BFP" pcap "$T/p01" -o "$T/p01s.pcap" --dst 198.18.0.1:7400
check "pcap -o - writes the capture to standard output" \
	"'$BFP' pcap '$T/p01' -o - --dst 198.18.0.1:7400 | cmp -s - '$T/p01s.pcap'"
check "report -o - writes the page to standard output" \
	"'$BFP' report -o - '$T/p01' | grep -q '<html'"
check "diff OLD - reads NEW from a pipe" \
	"cat '$S1' | '$BFP' diff -q '$S0' - -o - | cmp -s - '$T/p01'"
check "diff - NEW reads OLD from a redirected file" \
	"'$BFP' diff -q - '$S1' -o - < '$S0' | cmp -s - '$T/p01'"
check "apply - PATCH reads BASE from a pipe" \
	"cat '$S0' | '$BFP' apply -q - '$T/p01' -o - | cmp -s - '$S1'"
check "apply BASE - reads the patch from a pipe" \
	"cat '$T/p01' | '$BFP' apply -q '$S0' - -o - | cmp -s - '$S1'"
check "info - reads the patch from a pipe" \
	"cat '$T/p01' | '$BFP' info --json - | grep -q '\"frames\"'"
expect_fail "diff - - (two inputs from one standard input)" "" \
	"$BFP" diff -q - - -o "$T/x-two" < "$S0"
expect_fail "synth -o - (a directory to standard output)" "" "$BFP" synth -o - -p 300k -n 1
# a terminal: no binary output written to it, no input waited for from it
check "binary -o - to a terminal and - read from a terminal are refused" "python3 - '$BFP' '$S0' '$S1' '$T/p01' <<'EOF'
import os, pty, subprocess, sys
bfp, s0, s1, p01 = sys.argv[1:]
m, s = pty.openpty()
for args, kw in (([bfp, 'diff', '-q', s0, s1, '-o', '-'], {'stdout': s}),
                 ([bfp, 'apply', '-q', s0, p01, '-o', '-'], {'stdout': s}),
                 ([bfp, 'pcap', p01, '-o', '-', '--dst', '1.2.3.4:5'], {'stdout': s}),
                 ([bfp, 'info', '-'], {'stdin': s, 'stdout': subprocess.DEVNULL})):
    r = subprocess.run(args, stderr=subprocess.PIPE, timeout=30, **kw)
    assert r.returncode != 0 and b'terminal' in r.stderr, (args, r)
os.set_blocking(m, False)
try:
    got = os.read(m, 1 << 16)
except BlockingIOError:
    got = b''
assert not got, got[:80]
EOF"
# a reader that closes standard output early: an error, not a silent exit
"$BFP" diff -q -k "$S0" "$S1" -o "$T/pk" 
{ "$BFP" diff -q -k "$S0" "$S1" -o - 2>"$T/epipe.err"; echo $? >"$T/epipe.rc"; } | head -c 100 >/dev/null
check "diff -o - into a reader that closes early exits non-zero and says why" \
	"[ \$(wc -c < '$T/pk') -gt 200000 ] && [ \"\$(cat '$T/epipe.rc')\" -ne 0 ] &&
	 grep -q 'writing standard output: Broken pipe' '$T/epipe.err'"

# -q: nothing on stderr from any command that writes a file and would
# say so; --json: diff's and apply's summary is info --json's object for
# the patch, with the output and the seconds
"$BFP" synth -q -o "$T/trajq" -p 300k -n 1 -S 3 2>"$T/q.err" &&
	"$BFP" diff -q "$S0" "$S1" -o "$T/pq" 2>>"$T/q.err" &&
	"$BFP" apply -q "$S0" "$T/pq" -o "$T/oq.safetensors" 2>>"$T/q.err" &&
	"$BFP" pcap -q "$T/pq" -o "$T/pq.pcap" --dst 198.18.0.1:7400 2>>"$T/q.err" &&
	"$BFP" keygen -q "$T/q.key" 2>>"$T/q.err"
check "-q: synth, diff, apply, pcap and keygen print nothing" "[ \$? -eq 0 ] && [ ! -s '$T/q.err' ]"
"$BFP" diff --json "$S0" "$S1" -o "$T/pj" > "$T/diff.json" 2>"$T/diff.err" &&
	"$BFP" apply --json "$S0" "$T/pj" -o "$T/oj.safetensors" > "$T/apply.json" 2>"$T/apply.err" &&
	"$BFP" info --json "$T/pj" > "$T/pj.json"
check "diff --json and apply --json print info's fields for the patch, on stdout only" \
	"[ \$? -eq 0 ] && [ ! -s '$T/diff.err' ] && [ ! -s '$T/apply.err' ] && python3 -c \"
import json, sys
i = json.load(open('$T/pj.json'))
d, a = json.load(open('$T/diff.json')), json.load(open('$T/apply.json'))
for j, out in ((d, '$T/pj'), (a, '$T/oj.safetensors')):
    assert j['output'] == out and j['seconds'] >= 0, j
    del j['output'], j['seconds']
    assert j == i, (j, i)
\""
expect_fail "diff --json -o - (both on standard output)" "" "$BFP" diff --json "$S0" "$S1" -o -

# info: frames that do not tile the model (frame 0 twice, re-indexed and
# resealed) are refused; output that cannot be written is an error
python3 - "$T/p01" "$T/dup" <<'EOF'
import struct, sys
def crc32c(data, crc=0xFFFFFFFF):
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
p = open(sys.argv[1], 'rb').read()
plen = struct.unpack_from('<I', p, 44)[0]
f0 = bytearray(p[:60 + plen])
out = b''
for i in range(2):
    f = bytearray(f0)
    struct.pack_into('<II', f, 24, i, 2)
    struct.pack_into('<I', f, 56, crc32c(bytes(f[:56]) + bytes(f[60:])))
    out += bytes(f)
open(sys.argv[2], 'wb').write(out)
EOF
expect_fail "info refuses frames that do not tile the model" "" "$BFP" info "$T/dup"
"$BFP" info "$T/p01" > /dev/full 2>/dev/null
check "info into a full disk exits non-zero" "[ $? -ne 0 ]"
"$BFP" diff -q -b 0012 "$S0" "$S1" -o "$T/v12"
check "a zero-padded version is decimal (-b 0012: 12 -> 13)" "'$BFP' info '$T/v12' | grep -q 'versions  *12 -> 13'"

# a model with no parameters: a clear error, no (empty) patch
python3 -c "
import struct
open('$T/empty.safetensors', 'wb').write(struct.pack('<Q', 8) + b'{}      ')"
expect_fail "diff of models with no parameters" "$T/empty.bfp" \
	"$BFP" diff "$T/empty.safetensors" "$T/empty.safetensors" -o "$T/empty.bfp"
# outputs get the mode a plain create would: the umask counts
(umask 077; "$BFP" diff -q "$S0" "$S1" -o "$T/um.bfp")
check "outputs follow the umask" "[ \"\$(stat -c %a '$T/um.bfp')\" = 600 ]"

# pcap: the patch's frames as UDP packets, one each; with --key each also
# carries a trailer that an independent verifier (tests/authtool.py,
# docs/PROTOCOL.md 4) accepts, all bound to one run
make_key 7 "$T/key-7"
"$BFP" pcap "$T/p01" -o "$T/p01.pcap" --dst 198.18.0.1:7400 &&
	"$BFP" pcap "$T/p01" -o "$T/p01k.pcap" --dst 198.18.0.1:7400 --key "$T/key-7"
check "pcap, with and without --key: every frame once, signed with the key" \
	"python3 - '$HERE' '$T/p01' '$T/p01.pcap' '$T/p01k.pcap' '$T/key-7' <<'EOF'
import sys
sys.path.insert(0, sys.argv[1] + '/relay')
sys.path.insert(0, sys.argv[1])
from pcaptool import read_pcap, udp_parts
from tap_peers import frames
import authtool
fr = frames(sys.argv[2])
kid, key = authtool.read_key(sys.argv[5])
plain = [udp_parts(p)[4] for p in read_pcap(sys.argv[3])]
signed = [udp_parts(p)[4] for p in read_pcap(sys.argv[4])]
assert plain == fr, 'plain packets are not the frames'
assert len(signed) == len(fr)
runs = set()
for f, d in zip(fr, signed):
    m, run, t = authtool.open_(kid, key, d)
    assert m == f and t == 0 and run != 0
    runs.add(run)
assert len(runs) == 1, runs
print(len(fr), 'frames')
EOF"
chmod 644 "$T/key-7"
expect_fail "pcap with a key file others can read" "$T/p01l.pcap" \
	"$BFP" pcap "$T/p01" -o "$T/p01l.pcap" --dst 198.18.0.1:7400 --key "$T/key-7"

# an output path that is an input is refused, the input intact
cp "$T/p01" "$T/p01.keep"
expect_fail "pcap -o its own patch" "" \
	"$BFP" pcap "$T/p01" -o "$T/p01" --dst 198.18.0.1:7400
check "pcap left the patch it refused to overwrite intact" "cmp -s '$T/p01' '$T/p01.keep'"
expect_fail "report -o its own patch" "" "$BFP" report -o "$T/p01" "$T/p01"
cp "$S1" "$T/s1.keep"
expect_fail "report -o a checkpoint of its --trajectory" "" \
	"$BFP" report -o "$S1" -T "$T/traj" "$T/p01"
expect_fail "report -o its --base" "" "$BFP" report -o "$S1" -B "$S1" "$T/p01"
check "report left the inputs it refused to overwrite intact" \
	"cmp -s '$T/p01' '$T/p01.keep' && cmp -s '$S1' '$T/s1.keep'"
expect_fail "report --trajectory that does not exist" "$T/r.html" \
	"$BFP" report -o "$T/r.html" -T "$T/no-such-dir" "$T/p01"

# safetensors by content whatever the name; raw under a safetensors name refused
cp "$S0" "$T/s0.st"
"$BFP" diff -q "$T/s0.st" "$S1" -o "$T/p01st"
check "a safetensors file not named .safetensors is read as one (same patch)" \
	"cmp -s '$T/p01st' '$T/p01'"
expect_fail "apply to a raw base with -o NAME.safetensors" "$T/raw-out.safetensors" \
	"$BFP" apply "$T/old.bin" "$T/praw" -o "$T/raw-out.safetensors"
: > "$T/empty"
expect_fail "diff of an empty file" "$T/xe" "$BFP" diff "$T/empty" "$S1" -o "$T/xe"
check "an empty input is named as such" "grep -q 'empty file' '$T/stderr'"
mkfifo "$T/fifo"
expect_fail "diff of a FIFO (refused, not waited on)" "$T/xf" \
	timeout 10 "$BFP" diff "$T/fifo" "$S1" -o "$T/xf"
check "a FIFO input is refused as not a regular file" "grep -q 'not a regular file' '$T/stderr'"
expect_fail "info of a FIFO" "" timeout 10 "$BFP" info "$T/fifo"
expect_fail "report with a FIFO as its event log" "$T/xf.html" \
	timeout 10 "$BFP" report -o "$T/xf.html" -e "$T/fifo" "$T/p01"
check "... refused as not a regular file" "grep -q 'not a regular file' '$T/stderr'"

# a patch applied to weights that are not its base: the frame is intact,
# so the message points at the base, not at the patch
expect_fail "apply a patch to its own target" "$T/twice.safetensors" \
	"$BFP" apply "$S1" "$T/p01" -o "$T/twice.safetensors"
check "applying to the wrong base says the base is probably wrong" \
	"grep -q 'probably not version 0 of this model' '$T/stderr'"

# synth does not mix its steps with an older run's
"$BFP" synth -o "$T/traj4" -p 300k -n 2 -S 3 2>/dev/null
expect_fail "synth into a directory holding later steps of another run" "" \
	"$BFP" synth -o "$T/traj4" -p 300k -n 1 -S 9
check "synth left the other run's steps as they were" \
	"cmp -s '$T/traj4/step-0001.safetensors' '$S1'"
expect_fail "synth --params below 4096 gives the range" "" "$BFP" synth -o "$T/x" -p 1k
check "synth --params error names the range" "grep -q '4096 to' '$T/stderr'"

# an output name with no room for PATH.tmp.XXXXXX is still written atomically
L=$(printf '%0250d' 0)
"$BFP" diff -q "$S0" "$S1" -o "$T/$L"
check "an output name of 250 characters is written" "cmp -s '$T/$L' '$T/p01'"
rm -f "$T/$L"

# usage errors say what is wrong
expect_fail "diff without -o" "" "$BFP" diff "$S0" "$S1"
check "diff without -o says -o is required" "grep -q -- '-o PATCH is required' '$T/stderr'"
expect_fail "apply with an extra argument" "$T/xa" "$BFP" apply "$S0" "$T/p01" extra -o "$T/xa"
check "apply with an extra argument says so" "grep -q 'give BASE and PATCH' '$T/stderr'"
expect_fail "publish with a stray argument" "" \
	"$BFP" publish extra --dir "$T/traj" --listen 127.0.0.1:1
check "publish names the stray argument" "grep -q \"unexpected argument 'extra'\" '$T/stderr'"
expect_fail "demo --in-process with --keep" "$T/kept" \
	"$BFP" demo --in-process -p 200k -n 1 -k "$T/kept"
expect_fail "publish --rate under 1 kbit/s" "" \
	"$BFP" publish --dir "$T/traj" --listen 127.0.0.1:1 --rate 100
expect_fail "publish --resume with --buffer" "" \
	"$BFP" publish --buffer "$T/nobuf" --resume --listen 127.0.0.1:1
SHIM=$(dirname "$BFP")/../host_shim/bfpatch-shim
"$BFP" keygen "$T/auth.key" 2>/dev/null || bad "bfpatch keygen"
K="--key $T/auth.key" # the publisher, shims and relays below: authenticated
if [ -x "$SHIM" ]; then
	expect_fail "shim --exit-after with a unit" "" "$SHIM" -b "$T/nobuf" -u 127.0.0.1:1 -T 5m
	check "the shim names the option whose value it refuses" \
		"grep -q \"invalid value '5m' for --exit-after\" '$T/stderr'"
	expect_fail "shim --rate under 1 kbit/s" "" "$SHIM" -b "$T/nobuf" -u 127.0.0.1:1 --rate 100
	expect_fail "shim without --upstream" "" "$SHIM" -b "$T/nobuf"
	check "the shim says --upstream is required" "grep -q -- '--upstream ADDR:PORT is required' '$T/stderr'"
	expect_fail "shim with a stray argument" "" "$SHIM" -b "$T/nobuf" -u 127.0.0.1:1 stray
	check "the shim names the stray argument" "grep -q \"unexpected argument 'stray'\" '$T/stderr'"
	expect_fail "shim --init-version without --init" "" "$SHIM" -b "$T/nobuf" -u 127.0.0.1:1 -V 3
	check "... says it goes with --init" "grep -q -- '--init-version goes with --init' '$T/stderr'"
	# --version prints bfpatch version's line; given a value (the old
	# spelling of --init-version) it is refused, never a start that exits 0
	check "bfpatch-shim --version prints the line bfpatch version prints" \
		"[ \"\$('$SHIM' --version)\" = \"\$('$BFP' version)\" ]"
	expect_fail "shim --version with other options" "" \
		"$SHIM" -b "$T/nobuf" -u 127.0.0.1:1 -i "$S0" --version 3
	# one shim a buffer; --init on an existing buffer is a restart
	B=/dev/shm/bfpcli$$
	LP=$((20000 + $$ % 20000))
	# (meanwhile) an upstream where nothing answers is said after 10 s
	"$SHIM" $K -b $B.q -i "$S0" -u 127.0.0.1:$((LP + 10)) -l 127.0.0.1:$((LP + 11)) -T 11.5 \
		> "$T/shimq.log" 2>&1 &
	SQ=$!
	"$SHIM" $K -b $B -i "$S0" -u 127.0.0.1:1 -l 127.0.0.1:$((LP + 1)) -T 4 > "$T/shim1.log" 2>&1 &
	SP=$!
	for i in $(seq 50); do grep -q "listening" "$T/shim1.log" && break; sleep 0.1; done
	cp $B "$T/buf.before"
	expect_fail "a second shim on a buffer in use" "" \
		"$SHIM" $K -b $B -i "$S1" -u 127.0.0.1:1 -l 127.0.0.1:$((LP + 2)) -T 1
	check "the second shim says the buffer is in use, and left it as it was" \
		"grep -q 'in use by another bfpatch-shim' '$T/stderr' && cmp -s $B '$T/buf.before'"
	wait $SP
	"$SHIM" $K -b $B -i "$S0" -u 127.0.0.1:1 -l 127.0.0.1:$((LP + 3)) -T 1 > "$T/shim2.log" 2>&1
	check "a shim restarted with the same --init uses its buffer" \
		"[ $? -eq 0 ] && grep -q 'exists with this model: using it' '$T/shim2.log'"
	"$BFP" synth -o "$T/other" -p 2M -n 0 -S 5 2>/dev/null
	expect_fail "--init of another model onto an existing buffer" "" \
		"$SHIM" $K -b $B -i "$T/other/step-0000.safetensors" -u 127.0.0.1:1 -l 127.0.0.1:$((LP + 4)) -T 1
	check "the buffer of the other model is left as it was" "cmp -s $B '$T/buf.before'"
	wait $SQ
	check "a shim whose --upstream never answers says so" \
		"grep -q 'nothing of this model from --upstream 127.0.0.1:$((LP + 10))' '$T/shimq.log'"
	rm -f $B $B.*
	# a full /dev/shm-like tmpfs: an error at start, not a bus error mid-commit
	mkdir -p "$T/full"
	if mount -t tmpfs -o size=900k tmpfs "$T/full" 2>/dev/null; then
		expect_fail "a shim whose undo journal has no room" "" \
			"$SHIM" $K -b "$T/full/buf" -i "$S0" -u 127.0.0.1:1 -l 127.0.0.1:$((LP + 9)) -T 1
		check "it says it cannot reserve the journal" "grep -q 'cannot reserve' '$T/stderr'"
		umount "$T/full"
	fi
fi
# publish --steps 2 where step 2 is missing and step 3 is there (a
# trainer that keeps every other step): it stops at version 1 and says
# so, instead of waiting for ever or publishing step 3
mkdir "$T/st2"
cp "$S0" "$S1" "$T/st2/"
cp "$S2" "$T/st2/step-0003.safetensors"
timeout 60 "$BFP" publish $K --dir "$T/st2" --listen 127.0.0.1:$((20000 + ($$ + 17) % 20000)) \
	--steps 2 --linger 0 > "$T/st2.log" 2>&1
check "publish --steps 2 with step 2 missing stops at version 1" \
	"[ $? -eq 0 ] && grep -q 'stopping at version 1' '$T/st2.log' && grep -q 'at version 1;' '$T/st2.log'"

RELAY=$(dirname "$BFP")/../dpdk_app/bfpatch-relay
if [ -x "$RELAY" ]; then
	check "bfpatch-relay --version prints the line bfpatch version prints, without EAL" \
		"[ \"\$('$RELAY' --version)\" = \"\$('$BFP' version)\" ] &&
		 [ \"\$('$RELAY' -l 0 --no-huge -- --version)\" = \"\$('$BFP' version)\" ]"
	"$RELAY" --help > "$T/relay-help" 2>&1
	check "bfpatch-relay --help prints the relay's options without starting EAL" \
		"[ $? -eq 0 ] && grep -q -- '--cache-bytes' '$T/relay-help'"
	P=bfpclitest$$
	expect_fail "bfpatch-relay --ip for a port it does not have" "" timeout 60 "$RELAY" \
		--no-huge -m 512 --no-pci --file-prefix $P --vdev=net_null0 \
		--log-level=lib.eal:error -- --ip 3:198.18.0.5 $K
	rm -rf "/var/run/dpdk/$P"
	check "the relay says which port is missing" "grep -q 'there is no DPDK port 3' '$T/stderr'"
	# too few mbufs for the RX ring (1024 descriptors) and room beside it:
	# refused at start, not a relay that receives nothing
	expect_fail "bfpatch-relay --mbufs below what its RX rings take" "" timeout 60 "$RELAY" \
		--no-huge -m 512 --no-pci --file-prefix $P --vdev=net_null0 \
		--log-level=lib.eal:error -- --mbufs 1500 $K
	rm -rf "/var/run/dpdk/$P"
	check "the relay says how many mbufs it needs" "grep -q 'give at least' '$T/stderr'"
	# three worker lcores on a tap port (which wants as many TX queues as
	# RX queues): it starts, runs and ends with its counters
	if [ "$(id -u)" = 0 ] && [ -c /dev/net/tun ]; then
		timeout 60 "$RELAY" --no-huge -m 1024 --no-pci --file-prefix $P \
			--lcores 0@0,1@0,2@0,3@0 --vdev=net_tap0,iface=bfpct$$ \
			--log-level=lib.eal:error -- --run-time 1 $K > "$T/relay3.txt" 2>&1
		check "bfpatch-relay with three worker lcores on net_tap" \
			"[ $? -eq 0 ] && grep -q '3 worker lcore' '$T/relay3.txt'"
		rm -rf "/var/run/dpdk/$P"
	fi
fi

# usage errors exit 2; --help exits 0
for c in diff apply info synth demo pcap version; do
	"$BFP" $c --help >/dev/null 2>&1
	check "bfpatch $c --help exits 0" "[ $? -eq 0 ]"
	"$BFP" $c --no-such-option >/dev/null 2>&1
	check "bfpatch $c with an unknown option exits 2" "[ $? -eq 2 ]"
done
"$BFP" diff -s 99999 "$S0" "$S1" -o "$T/x10" >/dev/null 2>&1
check "out-of-range frame size is a usage error" "[ $? -eq 2 ] && [ ! -e '$T/x10' ]"
check "bfpatch version names the project's and the library's version" \
	"'$BFP' version | grep -q '^bfpatch [0-9.]* (libbfpatch [0-9.]*, frame format [0-9]*)$'"
"$BFP" nosuchcommand >/dev/null 2>&1
check "unknown command exits 2" "[ $? -eq 2 ]"
"$BFP" demo --in-process -p 200k -n 2 > "$T/demo.txt" 2>&1
check "demo runs and verifies every step" "grep -q 'all 2 steps verified bit-exact' '$T/demo.txt'"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
