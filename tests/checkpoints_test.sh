#!/bin/sh
# checkpoints_test.sh BFPATCH: checkpoints as trainers write them.
# Safetensors headers that change from step to step (__metadata__) travel
# in the patch file as header records (docs/FORMAT.md 4.1), and Hugging
# Face sharded checkpoints (an index and its shards, FORMAT.md 1) diff and
# apply shard by shard. Every result is compared byte for byte (cmp)
# with the files written by tests/make_shards.py and Python's json,
# independent of bfpatch; failures exit non-zero and write nothing.
set -u
BFP=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/test_lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

"$BFP" synth -q -o "$T/traj" -p 300k -n 2 -S 3 || { echo "synth failed"; exit 1; }
S0=$T/traj/step-0000.safetensors S1=$T/traj/step-0001.safetensors S2=$T/traj/step-0002.safetensors

# rehead SRC DST JSON [PAD]: SRC with its header's __metadata__ set to JSON
# (null: none), padded to 8 bytes and then PAD more spaces
rehead() {
	python3 - "$@" <<'PY'
import json, struct, sys
src, dst, meta = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
pad = int(sys.argv[4]) if len(sys.argv) > 4 else 0
b = open(src, "rb").read()
n = struct.unpack_from("<Q", b)[0]
h = json.loads(b[8:8 + n])
h.pop("__metadata__", None)
if meta is not None:
    h = dict([("__metadata__", meta)] + list(h.items()))
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8 + pad)
open(dst, "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
}
# records PATCH: the bytes after the frames (FORMAT.md 4), on stdout
records() {
	python3 - "$1" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
at = 0
while d[at:at + 4] == b"BFPT":
    at += 60 + struct.unpack_from("<I", d, at + 44)[0]
sys.stdout.buffer.write(d[at:])
PY
}
# same_dir A B: the same file names, each file byte for byte the same
same_dir() {
	[ "$(ls "$1")" = "$(ls "$2")" ] || return 1
	for f in "$1"/*; do cmp -s "$f" "$2/$(basename "$f")" || return 1; done
}

# ---- changed safetensors headers (FORMAT.md 4.1) ----
rehead "$S1" "$T/m1.safetensors" '{"step": "1"}'
rehead "$S2" "$T/m2.safetensors" '{"step": "2"}'
"$BFP" diff -q "$T/m1.safetensors" "$T/m2.safetensors" -o "$T/pm"
"$BFP" apply -q "$T/m1.safetensors" "$T/pm" -o "$T/om.safetensors"
check "metadata step 1 -> 2: the applied file is NEW byte for byte" \
	"cmp -s '$T/om.safetensors' '$T/m2.safetensors'"
"$BFP" info --json "$T/pm" > "$T/pm.json"
check "info --json: one header record, of NEW's header length" "python3 -c \"
import json, struct, sys
r = json.load(open('$T/pm.json'))['header_records']
n = struct.unpack_from('<Q', open('$T/m2.safetensors', 'rb').read(8))[0]
sys.exit(0 if [(x['kind'], x['file'], x['files'], x['bytes']) for x in r] ==
         [('safetensors_header', 0, 1, n)] else 1)
\""
check "info says the patch carries a header and its length" \
	"'$BFP' info '$T/pm' | grep -q '^headers  *safetensors header of file 0 of 1, [0-9]* bytes'"
rehead "$S2" "$T/g2.safetensors" '{"step": "2", "note": "a longer header: the data starts later"}' 64
"$BFP" diff -q "$T/m1.safetensors" "$T/g2.safetensors" -o "$T/pg"
"$BFP" apply -q "$T/m1.safetensors" "$T/pg" -o "$T/og.safetensors"
check "header grown (data section moves): round trip byte for byte" \
	"cmp -s '$T/og.safetensors' '$T/g2.safetensors'"
rehead "$S1" "$T/s1.safetensors" null
"$BFP" diff -q "$T/g2.safetensors" "$T/s1.safetensors" -o "$T/ps" -b 2 -t 3
"$BFP" apply -q "$T/g2.safetensors" "$T/ps" -o "$T/os.safetensors"
check "header shrunk: round trip byte for byte" "cmp -s '$T/os.safetensors' '$T/s1.safetensors'"
"$BFP" diff -q "$S0" "$S1" -o "$T/p01"
"$BFP" info --json "$T/p01" > "$T/p01.json"
check "the same headers: no record, the file is its frames only" \
	"[ -z \"\$(records '$T/p01')\" ] && python3 -c \"
import json, sys
sys.exit(0 if json.load(open('$T/p01.json'))['header_records'] == [] else 1)\" &&
	'$BFP' info '$T/p01' | grep -q '^headers  *none carried'"
"$BFP" apply -q "$S0" "$T/p01" -o "$T/o01.safetensors"
check "a patch without records applies as before" "cmp -s '$T/o01.safetensors' '$S1'"
# damaged records: refused, nothing written (expect_fail checks $T/x*)
len=$(wc -c < "$T/pm")
cp "$T/pm" "$T/pm-crc"
printf 'X' | dd of="$T/pm-crc" bs=1 seek=$((len - 30)) conv=notrunc 2>/dev/null
expect_fail "a record with a bad CRC is refused" "$T/x1" \
	"$BFP" apply -q "$T/m1.safetensors" "$T/pm-crc" -o "$T/x1.safetensors"
head -c $((len - 7)) "$T/pm" > "$T/pm-cut"
expect_fail "a truncated record is refused" "$T/x2" \
	"$BFP" apply -q "$T/m1.safetensors" "$T/pm-cut" -o "$T/x2.safetensors"
python3 - "$T/pm" "$T/pm-layout" "$S0" <<'PY'
# a record whose CRC is right but whose header gives another layout: the
# header of NEW with one tensor's shape changed
import json, struct, sys, zlib
d = open(sys.argv[1], "rb").read()
at = 0
while d[at:at + 4] == b"BFPT":
    at += 60 + struct.unpack_from("<I", d, at + 44)[0]
h = json.loads(d[at + 40:at + 40 + struct.unpack_from("<Q", d, at + 32)[0]])
k = next(k for k in h if k != "__metadata__")
h[k]["shape"] = [1] + h[k]["shape"]
j = json.dumps(h).encode()
j += b" " * (-len(j) % 8)
rec = bytearray(d[at:at + 40]) + j
struct.pack_into("<Q", rec, 32, len(j))
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF
open(sys.argv[2], "wb").write(d[:at] + rec + struct.pack("<I", crc32c(rec)))
PY
expect_fail "a record whose header gives another tensor layout is refused" "$T/x3" \
	"$BFP" apply -q "$T/m1.safetensors" "$T/pm-layout" -o "$T/x3.safetensors"

# ---- sharded checkpoints (FORMAT.md 1) ----
python3 "$HERE/make_shards.py" "$S0" "$T/sh0" 3
python3 "$HERE/make_shards.py" "$S1" "$T/sh1" 3
python3 "$HERE/make_shards.py" "$S2" "$T/sh2" 3 --index-meta step=2 --shard-meta 1:step=2
"$BFP" diff -q "$T/sh0" "$T/sh1" -o "$T/q01"
"$BFP" apply -q "$T/sh0" "$T/q01" -o "$T/out1"
check "sharded: diff/apply gives every shard and the index byte for byte" \
	"same_dir '$T/out1' '$T/sh1'"
"$BFP" diff -q "$S0" "$S1" -o "$T/p01same"
check "sharded: the patch of the shards is the one of the single file (one parameter space)" \
	"cmp -s '$T/q01' '$T/p01same'"
"$BFP" diff -q "$T/sh0/model.safetensors.index.json" "$T/sh1/model.safetensors.index.json" \
	-o "$T/q01i"
check "sharded: an index file names its checkpoint as its directory does" "cmp -s '$T/q01' '$T/q01i'"
"$BFP" diff -q -b 1 "$T/sh1" "$T/sh2" -o "$T/q12"
"$BFP" info --json "$T/q12" > "$T/q12.json"
check "sharded: a new shard header and index travel as two records" "python3 -c \"
import json, sys
r = json.load(open('$T/q12.json'))['header_records']
sys.exit(0 if [(x['kind'], x['file'], x['files']) for x in r] ==
         [('safetensors_header', 1, 3), ('shard_index', 0, 3)] else 1)
\""
"$BFP" apply -q "$T/out1" "$T/q12" -o "$T/out2"
check "sharded: chained, with new metadata in a shard and the index: byte for byte" \
	"same_dir '$T/out2' '$T/sh2'"
cp -r "$T/out1" "$T/keep1"
"$BFP" apply -q "$T/out1" "$T/q12" -o "$T/out2" 2>/dev/null
check "sharded: an existing OUTDIR is refused without -f, left as it was" \
	"[ \$? -ne 0 ] && same_dir '$T/out2' '$T/sh2'"
"$BFP" apply -q -f "$T/sh0" "$T/q01" -o "$T/out2"
check "sharded: -f replaces the files of an existing OUTDIR" "same_dir '$T/out2' '$T/sh1'"
"$BFP" apply -q "$T/keep1" "$T/q12" -o "$T/keep1"
check "sharded: in place (OUTDIR is BASE) without -f" "same_dir '$T/keep1' '$T/sh2'"
expect_fail "sharded: a patch for another base writes no OUTDIR" "$T/x5" \
	"$BFP" apply -q "$T/sh2" "$T/q01" -o "$T/x5"
cp "$T/q12" "$T/q12-crc"
printf 'X' | dd of="$T/q12-crc" bs=1 seek=$(($(wc -c < "$T/q12") - 30)) conv=notrunc 2>/dev/null
expect_fail "sharded: a damaged index record writes no OUTDIR" "$T/x6" \
	"$BFP" apply -q "$T/sh1" "$T/q12-crc" -o "$T/x6"
check "sharded: no temporaries left in a refused OUTDIR" \
	"! ls '$T/out2' | grep -q tmp && ! ls '$T/keep1' | grep -q tmp"
# shards of odd data lengths: the second begins at an odd byte of the
# parameter space (FORMAT.md 1)
python3 - "$T" <<'PY'
import json, os, random, struct, sys
def st(path, tensors):
    h, off, data = {}, 0, b""
    for name, dt, shape, b in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        data += b
    j = json.dumps(h).encode()
    j += b" " * (-len(j) % 8)
    open(path, "wb").write(struct.pack("<Q", len(j)) + j + data)
for d, seed in (("odd0", 1), ("odd1", 2)):
    d = os.path.join(sys.argv[1], d)
    os.makedirs(d)
    r = random.Random(seed)
    rb = lambda n: bytes(r.randrange(256) for _ in range(n))
    st(d + "/a.safetensors", [("u", "U8", [3], rb(3))])
    st(d + "/b.safetensors", [("w", "BF16", [300], rb(600)), ("v", "U8", [5], rb(5))])
    json.dump({"weight_map": {"u": "a.safetensors", "w": "b.safetensors", "v": "b.safetensors"}},
              open(d + "/model.safetensors.index.json", "w"))
PY
"$BFP" diff -q "$T/odd0" "$T/odd1" -o "$T/qodd" && "$BFP" apply -q "$T/odd0" "$T/qodd" -o "$T/oodd"
check "sharded: shards of odd lengths round trip byte for byte" "same_dir '$T/oodd' '$T/odd1'"
# indexes that disagree with their shards
cp -r "$T/sh0" "$T/bad1"
rm "$T/bad1/model-00002-of-00003.safetensors"
expect_fail "sharded: an index naming a missing file is refused" "$T/x7" \
	"$BFP" diff -q "$T/bad1" "$T/sh1" -o "$T/x7"
grep -q "missing" "$T/stderr" || bad "the message names the missing file: $(cat "$T/stderr")"
# editidx DIR PYTHON: change DIR's index (w: its weight_map) with PYTHON
editidx() {
	python3 - "$1/model.safetensors.index.json" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
w = d["weight_map"]
exec(sys.argv[2])
json.dump(d, open(sys.argv[1], "w"))
PY
}
cp -r "$T/sh0" "$T/bad2"
editidx "$T/bad2" 'k = sorted(w)[0]; w[k] = "model-00003-of-00003.safetensors" if w[k] != "model-00003-of-00003.safetensors" else "model-00001-of-00003.safetensors"'
expect_fail "sharded: an index mapping a tensor to a shard without it is refused" "$T/x8" \
	"$BFP" diff -q "$T/bad2" "$T/sh1" -o "$T/x8"
cp -r "$T/sh0" "$T/bad3"
editidx "$T/bad3" 'del w[sorted(w)[-1]]'
expect_fail "sharded: a shard tensor the index does not map is refused" "$T/x9" \
	"$BFP" diff -q "$T/bad3" "$T/sh1" -o "$T/x9"
cp -r "$T/sh0" "$T/bad4"
editidx "$T/bad4" 'w["no.such.tensor"] = "model-00001-of-00003.safetensors"'
expect_fail "sharded: an index mapping a tensor no shard holds is refused" "$T/x10" \
	"$BFP" diff -q "$T/bad4" "$T/sh1" -o "$T/x10"
cp -r "$T/sh0" "$T/bad5"
editidx "$T/bad5" 'k = sorted(w)[0]; w[k] = "../sh1/" + w[k]'
expect_fail "sharded: an index naming a file outside its directory is refused" "$T/x11" \
	"$BFP" diff -q "$T/bad5" "$T/sh1" -o "$T/x11"
expect_fail "a sharded OLD and a single-file NEW are refused" "$T/x12" \
	"$BFP" diff -q "$T/sh0" "$S1" -o "$T/x12"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
