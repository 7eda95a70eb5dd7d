#!/bin/sh
# change-lists.sh BFPATCH SHIM BUILD_ROOT (set-up in lib.sh): the change
# lists a keyed bfpatch-shim keeps (--changes, default 4), read through
# the package. Seven versions of a model with BF16, F32, U8, I64 tensors
# (one BF16 tensor at an odd byte offset, one re-initialised whole in
# version 3, so its frames are keyframe-coded) are published one by one.
# Applying the lists to an independent copy of an older version (numpy
# arrays read from its safetensors file here, not from the buffer) gives
# the next checkpoint's bytes exactly, from 1, 2, 3 and 4 versions
# behind, into numpy arrays and into torch tensors; a version whose list
# is no longer kept, a damaged list (a flipped value, a file cut short,
# another model's header), a keyframe resync and a commit finished by a
# restarted shim raise ChangesUnavailable and touch no tensor; a missing
# tensor raises KeyError first. A third shim commits at the actor's safe
# point, so every frame is prepared first and each list is written then,
# before its commit: those lists equal the others; one written for a
# preparation that is then dropped (the buffer changed under it: the
# commit fails verification, a keyframe resync follows) is never placed.
set -u
. "$(dirname "$0")/lib.sh"
cat > "$T/model.py" <<'PYEOF'
# the model: version 0 from a seed, each next one from the one before by
# integer arithmetic on the bits; and an independent safetensors reader
import json, struct
import numpy as np
SPECS = [("embed.weight", "BF16", "<u2", (96, 64)), ("scale", "F32", "<f4", (50, 7)),
         ("mask", "U8", "u1", (333,)), ("odd.weight", "BF16", "<u2", (40, 33)),
         ("flag", "U8", "u1", (3,)), ("reinit.weight", "BF16", "<u2", (64, 64)),
         ("steps", "I64", "<i8", (9,))]
DT = {st: npdt for _, st, npdt, _ in SPECS}


def version0():
    rng = np.random.default_rng(5)
    t = {}
    for name, st, npdt, shape in SPECS:
        n = int(np.prod(shape))
        t[name] = rng.integers(0, 1 << 16, n, dtype=np.uint16).reshape(shape) & 0x3FFF | 0x3000 \
            if npdt == "<u2" else rng.integers(0, 256, n * np.dtype(npdt).itemsize,
                                               dtype=np.uint8).view(npdt).reshape(shape)
    return t


def step(t, v):
    rng = np.random.default_rng(100 + v)
    out = {k: a.copy() for k, a in t.items()}
    for name in ("embed.weight", "odd.weight", "reinit.weight"):
        f = out[name].reshape(-1)
        i = rng.choice(f.size, f.size // 40, replace=False)
        f[i] += np.where(rng.integers(0, 2, i.size) == 1, 1, -1).astype(np.uint16)
    if v == 3:  # re-initialised whole: keyframe-coded frames in the patch
        out["reinit.weight"] = rng.integers(0, 1 << 16, (64, 64), dtype=np.uint16)
    s = out["scale"].reshape(-1).view(np.uint32)  # an F32 element's low or high half
    i = rng.choice(s.size, 12, replace=False)
    s[i[:6]] ^= 1
    s[i[6:]] ^= 0x10000
    m = out["mask"]
    i = rng.choice(m.size, 20, replace=False)
    m[i] = rng.integers(0, 256, i.size, dtype=np.uint8)
    out["steps"][v % 9] += 1
    return out


def write(path, t):
    meta, at = {}, 0
    for name, st, _, shape in SPECS:
        meta[name] = {"dtype": st, "shape": list(shape), "data_offsets": [at, at + t[name].nbytes]}
        at += t[name].nbytes
    h = json.dumps(meta).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h +
                           b"".join(t[n].tobytes() for n, _, _, _ in SPECS))


def read(path):
    """the tensors of a safetensors file as fresh numpy arrays"""
    d = open(path, "rb").read()
    n = struct.unpack_from("<Q", d)[0]
    meta = json.loads(d[8:8 + n])
    out = {}
    for name, m in meta.items():
        b, e = m["data_offsets"]
        out[name] = np.frombuffer(d[8 + n + b:8 + n + e], dtype=DT[m["dtype"]]).reshape(
            m["shape"]).copy()
    return out
PYEOF
mkdir "$T/src" "$T/traj"
$PY - "$T" <<'PYEOF' || exit 1
import sys
sys.path.insert(0, sys.argv[1])
from model import *
t = version0()
for v in range(9):
    write("%s/src/step-%04d.safetensors" % (sys.argv[1], v), t)
    t = step(t, v + 1)
PYEOF
# publish V: checkpoint V where the publisher takes it (renamed in)
publish() {
	cp "$T/src/step-$(printf %04d "$1").safetensors" "$T/traj/.new"
	mv "$T/traj/.new" "$T/traj/step-$(printf %04d "$1").safetensors"
}
# step V: publish V where the publisher takes it, wait for its commit
step() {
	publish $1
	wait_line "committed version $(($1 - 1)) -> $1" "$T/shim.log" 300 ||
		fail "version $1 was not committed"
}
cp "$T/src/step-0000.safetensors" "$T/traj/"
"$BFP" publish $K --dir "$T/traj" --listen 127.0.0.1:$port --linger 60 > "$T/publish.log" 2>&1 &
PIDS="$!"
"$SHIM" $K --buffer "$SHM" --init "$T/src/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 1)) > "$T/shim.log" 2>&1 &
SHIMPID=$!
PIDS="$PIDS $SHIMPID"
# and, where the build has DPDK, a shim that commits through dmadev
dma=
if "$SHIM" --help | grep -q -- "--dma DEV"; then
	dma=$SHM.dma
	"$SHIM" $K --buffer "$dma" --init "$T/src/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 2)) --dma dma_skeleton0 \
		> "$T/dma.log" 2>&1 &
	PIDS="$PIDS $!"
fi
# and one that commits at the actor's safe point, its lists written
# while the patches wait for it
SP=$SHM.sp
"$SHIM" $K --buffer "$SP" --init "$T/src/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 3)) --commit safe-point > "$T/sp.log" 2>&1 &
SPPID=$!
PIDS="$PIDS $SPPID"
# sp_tmp V: the temporary of version V's list in the safe-point shim's
# directory, written while its patch was prepared: wait for it
sp_tmp() {
	f=$SP.changes/.$(printf %010d "$1").chg.tmp
	for _ in $(seq 300); do [ -f "$f" ] && return 0; sleep 0.1; done
	return 1
}
sp_allow() {
	$PY -c "import bfpatch, sys; bfpatch.WeightBuffer(sys.argv[1]).safe_point(timeout=60)" \
		"$SP" || fail "the safe point of version $1"
}
for v in 1 2 3 4 5; do
	step $v
	[ -z "$dma" ] || wait_line "committed version $((v - 1)) -> $v: .*(dma)" "$T/dma.log" 300 ||
		fail "version $v was not committed through dmadev"
	wait_line "version $v staged; waiting" "$T/sp.log" 300 ||
		fail "version $v was not staged at the safe-point shim"
	if [ $v = 3 ]; then # keyframe-coded frames: known once written, in the commit
		sp_allow $v
		wait_line "committed version 2 -> 3: .*change list of [0-9]* weights in" "$T/sp.log" \
			300 || fail "version 3's list was not written in its commit"
	else
		sp_tmp $v || fail "version $v's list was not written while its patch was prepared"
		sp_allow $v
		wait_line "committed version $((v - 1)) -> $v: .*written while staged" "$T/sp.log" \
			300 || fail "version $v's list, written while staged, was not placed"
	fi
done
grep -q "change list of" "$T/shim.log" || fail "the shim wrote no change lists"

# 1. from 1-4 versions behind, numpy and torch; what is no longer kept
$PY - "$T" "$SHM" $dma <<'PYEOF' || fail "applying change lists"
import sys
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SHM = sys.argv[1:3]
buf = bfpatch.WeightBuffer(SHM)
assert buf.version == 5, buf.version
step_t = lambda v: read("%s/src/step-%04d.safetensors" % (T, v))
want = step_t(5)
for since in (4, 3, 2, 1):
    a = step_t(since)
    assert buf.apply_changes(a, since) == 5
    for name in want:
        assert a[name].tobytes() == want[name].tobytes(), (since, name)
    chain = buf.changes_since(since, torch=False)
    assert [(c.base, c.version) for c in chain] == [(v, v + 1) for v in range(since, 5)]
print("ok - numpy copies of versions 4, 3, 2 and 1 reach version 5's bytes exactly")
# every dtype's list alone: the newest on the version before it; 16-bit
# (at an even offset) and 1-byte tensors' values for older versions too
WIDE = ("scale", "steps", "odd.weight")
cl = buf.changes(5, torch=False)
assert (cl.base, cl.version) == (4, 5) and set(cl) >= {"embed.weight", "scale", "mask",
                                                     "odd.weight", "steps"}, cl
for v in (2, 3, 4, 5):
    a, b = step_t(v - 1), step_t(v)
    for name, (idx, val) in buf.changes(v, torch=False).items():
        if name in WIDE and v != 5:
            continue  # the committed version's values
        assert val.dtype == a[name].dtype, name
        a[name].reshape(-1)[idx] = val
    for name in b:
        if v == 5 or name not in WIDE:
            assert a[name].tobytes() == b[name].tobytes(), (v, name)
print("ok - each list alone takes its base to its version (BF16, U8; F32, I64 and BF16 at an "
      "odd offset for the committed one)")
n3 = buf.changes(3, torch=False)["reinit.weight"][0]
assert len(n3) == 64 * 64 and bfpatch.changes.read_list(buf, 3, None, 3).dense, len(n3)
print("ok - the re-initialised tensor's keyframe-coded frames list every element (%d)" % len(n3))
if len(sys.argv) > 3:  # the DMA commit's lists: the same changes
    dbuf = bfpatch.WeightBuffer(sys.argv[3])
    for v in (2, 3, 4, 5):
        c, d = buf.changes(v, torch=False), dbuf.changes(v, torch=False)
        assert (c.base, c.version, sorted(c)) == (d.base, d.version, sorted(d)), v
        for name in c:
            assert all(x.tobytes() == y.tobytes() for x, y in zip(c[name], d[name])), (v, name)
    a = step_t(2)
    assert dbuf.apply_changes(a, 2) == 5
    assert all(a[n].tobytes() == want[n].tobytes() for n in want)
    print("ok - a shim committing through dmadev writes the same lists")
sbuf = bfpatch.WeightBuffer(SHM + ".sp")
for v in (2, 3, 4, 5):  # written while staged (2, 4, 5) and in the commit (3)
    c, d = buf.changes(v, torch=False), sbuf.changes(v, torch=False)
    assert (c.base, c.version, sorted(c)) == (d.base, d.version, sorted(d)), v
    for name in c:
        assert all(x.tobytes() == y.tobytes() for x, y in zip(c[name], d[name])), (v, name)
a = step_t(1)
assert sbuf.apply_changes(a, 1) == 5
assert all(a[n].tobytes() == want[n].tobytes() for n in want)
print("ok - lists written while the patches were staged are the same lists")
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    for since in (4, 2):
        a = step_t(since)
        tt = {n: torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if x.dtype == np.uint16
              else torch.from_numpy(x) for n, x in a.items()}
        tt["scale"].requires_grad_(True)  # a parameter as a model holds it
        assert buf.apply_changes(tt, since) == 5
        for name in want:
            assert a[name].tobytes() == want[name].tobytes(), (since, name)
    cl = buf.changes(5)
    i, val = cl["embed.weight"]
    assert i.dtype == torch.int64 and val.dtype == torch.bfloat16
    assert cl["scale"][1].dtype == torch.float32 and cl["mask"][1].dtype == torch.uint8
    print("ok - torch tensors (BF16 as torch.bfloat16) reach version 5 bit for bit; "
          "index_copy_ per tensor")
else:
    print("skip - no torch: the torch half")
try:
    buf.apply_changes(step_t(0), 0)
    raise SystemExit("a list no longer kept was not noticed")
except bfpatch.ChangesUnavailable as x:
    assert isinstance(x, LookupError) and x.have == 0 and x.want == 5, (x.have, x.want)
    assert "history too short" in str(x), x
    print("ok - 5 versions behind with 4 lists kept: ChangesUnavailable (%s)" % x)
a = step_t(4)
del a["mask"]
try:
    buf.apply_changes(a, 4)
    raise SystemExit("a missing tensor was not noticed")
except KeyError as x:
    assert a["embed.weight"].tobytes() == step_t(4)["embed.weight"].tobytes()
    print("ok - a tensor not given: KeyError before any is touched")
assert buf.apply_changes(a, 4, strict=False) == 5
assert a["embed.weight"].tobytes() == want["embed.weight"].tobytes()
print("ok - strict=False skips it")
PYEOF

# 2. damaged lists are refused, nothing applied
$PY - "$T" "$SHM" <<'PYEOF' || fail "damaged change lists"
import os, shutil, struct, sys, zlib
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SHM = sys.argv[1:3]
buf = bfpatch.WeightBuffer(SHM)
f = SHM + ".changes/0000000005.chg"
good = open(f, "rb").read()
hdr = bytearray(good[:64])
hdr[16] ^= 1  # another model, its CRC made right: the model check refuses it
struct.pack_into("<I", hdr, 60, zlib.crc32(good[64:], zlib.crc32(bytes(hdr[:60]))))
n0 = struct.unpack_from("<I", good, 64 + 12)[0]  # the first entry's changes
at = 64 + 24 + 4 * n0  # its first value's low byte: only the CRC can tell
for what, bad in (("a flipped value", good[:at] + bytes([good[at] ^ 1]) + good[at + 1:]),
                  ("cut short", good[:-40]), ("another model", bytes(hdr) + good[64:]),
                  ("not a list", b"x" * 100)):
    open(f + ".x", "wb").write(bad)
    os.rename(f + ".x", f)
    a = read("%s/src/step-0004.safetensors" % T)
    try:
        buf.apply_changes(a, 4)
        raise SystemExit("a damaged list (%s) was applied" % what)
    except bfpatch.ChangesUnavailable as x:
        assert "damaged" in str(x), x
        assert all(a[n].tobytes() == b.tobytes()
                   for n, b in read("%s/src/step-0004.safetensors" % T).items())
        print("ok - %s: refused, nothing applied (%s)" % (what, x))
open(f + ".x", "wb").write(good)
os.rename(f + ".x", f)
PYEOF

# 3. a keyframe resync breaks the chain: the actor writes into a weight,
# the next commit fails verification, the keyframe stream commits 6
$PY - "$SHM" <<'PYEOF' || fail "tampering"
import bfpatch
import sys
buf = bfpatch.WeightBuffer(sys.argv[1])
buf.tensor("embed.weight", writable=True).reshape(-1)[:64] ^= 0x40
PYEOF
publish 6
wait_line "committed version .* -> 6 (keyframe resync" "$T/shim.log" 600 ||
	fail "no keyframe resync to version 6"
# the safe-point shim: version 6's list is written while its patch waits;
# then the actor writes into a weight, and the commit fails verification
wait_line "version 6 staged; waiting" "$T/sp.log" 300 ||
	fail "version 6 was not staged at the safe-point shim"
sp_tmp 6 || fail "version 6's list was not written while its patch was prepared"
$PY - "$SP" <<'PYEOF' || fail "tampering"
import bfpatch
import sys
buf = bfpatch.WeightBuffer(sys.argv[1])
buf.tensor("embed.weight", writable=True).reshape(-1)[:64] ^= 0x40
PYEOF
sp_allow 6
wait_line "committed version .* -> 6 (keyframe resync" "$T/sp.log" 600 ||
	fail "no keyframe resync to version 6 at the safe-point shim"
grep -q "commit 5 -> 6 failed verification" "$T/sp.log" ||
	fail "the safe-point shim's commit to 6 did not fail verification"
$PY - "$T" "$SP" <<'PYEOF' || fail "a list of a dropped preparation"
import os, sys
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SP = sys.argv[1:3]
buf = bfpatch.WeightBuffer(SP)
assert buf.version == 6, buf.version
assert sorted(os.listdir(SP + ".changes")) == ["0000000006.chg"], os.listdir(SP + ".changes")
assert bfpatch.changes.read_list(buf, 6, None, 6).flags & bfpatch.changes.F_KEY
a = read("%s/src/step-0005.safetensors" % T)
try:
    buf.apply_changes(a, 5)
    raise SystemExit("the list written while a dropped preparation waited was placed")
except bfpatch.ChangesUnavailable as x:
    assert "keyframe resync" in str(x) and (x.have, x.want) == (5, 6), x
    print("ok - a list written for a preparation then dropped is removed, never placed (%s)"
          % x)
PYEOF
kill "$SPPID"
step 7
$PY - "$T" "$SHM" <<'PYEOF' || fail "after a keyframe resync"
import os, sys
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SHM = sys.argv[1:3]
buf = bfpatch.WeightBuffer(SHM)
assert buf.version == 7
assert sorted(os.listdir(SHM + ".changes")) == ["0000000006.chg", "0000000007.chg"], \
    os.listdir(SHM + ".changes")
a = read("%s/src/step-0005.safetensors" % T)
try:
    buf.apply_changes(a, 5)
    raise SystemExit("a chain across a keyframe resync was applied")
except bfpatch.ChangesUnavailable as x:
    assert "keyframe resync" in str(x) and x.have == 5 and x.want == 7, x
    assert a["embed.weight"].tobytes() == read("%s/src/step-0005.safetensors" % T)[
        "embed.weight"].tobytes()
    print("ok - across the keyframe resync: ChangesUnavailable (%s)" % x)
a = read("%s/src/step-0006.safetensors" % T)
assert buf.apply_changes(a, 6) == 7
assert all(a[n].tobytes() == b.tobytes()
           for n, b in read("%s/src/step-0007.safetensors" % T).items())
print("ok - after it the chain starts again: version 6 + list 7 = version 7")
PYEOF

# 4. a commit finished by a restarted shim: its changes are not known
kill "$SHIMPID"
wait "$SHIMPID" 2>/dev/null
"$SHIM" $K --buffer "$SHM" --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 1)) \
	--crash-after 1 > "$T/crash.log" 2>&1 &
SHIMPID=$!
publish 8
wait "$SHIMPID" 2>/dev/null
grep -q "killing myself in the middle of the commit to version 8" "$T/crash.log" ||
	fail "the shim did not stop in the middle of commit 8"
"$SHIM" $K --buffer "$SHM" --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 1)) \
	>> "$T/shim.log" 2>&1 &
PIDS="$PIDS $!"
wait_line "committed version 7 -> 8: .*before a crash, no change list" "$T/shim.log" 300 ||
	fail "the commit to version 8 was not finished"
$PY - "$T" "$SHM" <<'PYEOF' || fail "after a commit finished by a restarted shim"
import sys
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SHM = sys.argv[1:3]
buf = bfpatch.WeightBuffer(SHM)
a = read("%s/src/step-0007.safetensors" % T)
try:
    buf.apply_changes(a, 7)
    raise SystemExit("a commit finished after a restart was applied from its list")
except bfpatch.ChangesUnavailable as x:
    assert "restarted" in str(x) and (x.have, x.want) == (7, 8), x
    print("ok - a commit finished by a restarted shim: ChangesUnavailable (%s)" % x)
PYEOF
stop_pids
echo "ok - change lists: numpy and torch copies follow the shim's versions bit for bit"
