#!/bin/sh
# publish-sharded.sh BFPATCH SHIM BUILD_ROOT (set-up in lib.sh): a sharded
# trainer from Python. Two ranks each hold half of a model's tensors and
# commit them with bfpatch.Publisher(path, full_layout, owned=names);
# each rank's `bfpatch publish --buffer --lead --rank I` encodes its own
# tensors (the owned set read from PATH.owned) and sends the frames to a
# lead (`bfpatch publish --ranks 2`), which merges them for a keyed shim.
# After each of 4 versions the actor's buffer holds the whole model's
# bytes (sha256 of the data section, read from the file here); versions 3
# and 4 are published back to back, and still every rank takes both (a
# rank's publish() waits until its publisher took the version before:
# ranks never skip one). publish() takes exactly the owned tensors: one
# that is not owned, or an owned one missing, is refused before anything
# is written. One tensor is new throughout each version, so the lead's
# patches hold keyframe-coded frames too, and a 7-byte tensor of one rank
# shares its last 16-bit word with the next tensor, another rank's (the
# word goes with the first, as in a whole-model patch).
set -u
. "$(dirname "$0")/lib.sh"
export BFPATCH_WBUF_LIB="$BUILD/publisher/libbfpatch_wbuf.so"
[ -f "$BFPATCH_WBUF_LIB" ] || { echo "FAIL: no $BFPATCH_WBUF_LIB"; exit 1; }
asan=$(ldd "$BFPATCH_WBUF_LIB" | awk '/libasan/ {print $3}')
[ -z "$asan" ] || PY="env LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0 $PY"
cat > "$T/model.py" <<'PYEOF'
# the model of both ranks: version 0 from a seed, each next version from
# the one before (about 2% of the BF16 words one step up or down)
import hashlib, struct
import numpy as np
SHAPES = [("embed.weight", (384, 256)), ("layers.0.attn.weight", (256, 256)),
          ("layers.0.mlp.weight", (512, 256)), ("layers.1.attn.weight", (256, 256)),
          ("layers.1.mlp.weight", (512, 256)), ("norm.weight", (256,)),
          ("mask", (7,)),        # U8, 7 bytes: its last word is shared with the next
          ("rescale", (4096,))]  # BF16 at an odd offset, new throughout each version
# rank 1: the attention weights and the norm; rank 0 the rest, mask and
# rescale together (they share a word)
OWNED = [[n for i, (n, _) in enumerate(SHAPES) if i not in (1, 3, 5)],
         [n for i, (n, _) in enumerate(SHAPES) if i in (1, 3, 5)]]


def version0():
    rng = np.random.default_rng(5)
    t = {n: (((rng.standard_normal(s) * 0.02).astype(np.float32)).view(np.uint32) >> 16)
         .astype(np.uint16) for n, s in SHAPES}
    t["mask"] = rng.integers(0, 256, 7, dtype=np.uint8)
    return t


def step(t, v):
    rng = np.random.default_rng(200 + v)
    out = {}
    for n, a in t.items():
        if n == "rescale":
            out[n] = rng.integers(0, 0x7F00, a.size, dtype=np.uint16)
            continue
        if n == "mask":
            out[n] = (a + np.uint8(v)).astype(np.uint8)
            continue
        a = a.copy()
        flat = a.reshape(-1)
        idx = rng.choice(flat.size, flat.size // 50, replace=False)
        idx = idx[(flat[idx] & 0x7F80) != 0x7F80]
        flat[idx] += np.where(rng.integers(0, 2, idx.size) == 1, 1, -1).astype(np.uint16)
        out[n] = a
    return out


def data_sha(t):
    return hashlib.sha256(b"".join(a.tobytes() for a in t.values())).hexdigest()


def buffer_file(path):
    d = open(path, "rb").read()
    off, n = struct.unpack_from("<QQ", d, 48)
    return struct.unpack_from("<I", d, 64)[0], hashlib.sha256(d[off:off + n]).hexdigest()
PYEOF
# 1. each rank's buffer, of the whole layout, and the checkpoint everyone starts from
$PY - "$T" "$SHM" <<'PYEOF' || exit 1
import os, sys
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SHM = sys.argv[1:3]
t = version0()
for r in (0, 1):
    with bfpatch.Publisher("%s.r%d" % (SHM, r), t, owned=OWNED[r]) as pub:
        assert pub.owned == tuple(OWNED[r]), pub.owned
        if r == 0:
            pub.save_safetensors(T + "/step-0000.safetensors")
    assert open("%s.r%d.owned" % (SHM, r)).read().split("\n")[:-1] == OWNED[r]
try:
    bfpatch.Publisher(SHM + ".r0", t, owned=["no.such.tensor"])
    raise AssertionError("an owned name not in the layout was taken")
except bfpatch.LayoutError as x:
    print("ok - refused, an owned tensor not in the layout: %s" % x)
try:
    bfpatch.Publisher(SHM + ".r0", t, owned=["embed.weight", "mask"])
    raise AssertionError("a word shared with a tensor of another rank was taken")
except bfpatch.LayoutError as x:
    print("ok - refused, a word shared with another rank's tensor: %s" % x)
print("ok - two rank buffers of the whole layout, owning %d and %d tensors"
      % (len(OWNED[0]), len(OWNED[1])))
PYEOF
# 2. a keyed shim, the lead, and one rank publisher per buffer
"$SHIM" $K --buffer "$SHM.a" --init "$T/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 1)) --exit-after 90 > "$T/shim.log" 2>&1 &
PIDS="$!"
"$BFP" publish $K --ranks 2 --rank-listen 127.0.0.1:$((port + 2)) \
	--init "$T/step-0000.safetensors" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 4 \
	--linger 2 --history "$T" > "$T/lead.log" 2>&1 &
PUB=$!
for r in 0 1; do
	"$BFP" publish $K --buffer "$SHM.r$r" --lead 127.0.0.1:$((port + 2)) --rank $r \
		--steps 4 > "$T/rank$r.log" 2>&1 &
	PIDS="$PIDS $!"
done
# 3. four versions, each rank committing its own tensors; 1 and 2 each
# checked on the actor before the next, 3 and 4 back to back
$PY - "$T" "$SHM" <<'PYEOF' || fail "publishing from two ranks"
import sys, time
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SHM = sys.argv[1:3]
t = version0()
pubs = [bfpatch.Publisher("%s.r%d" % (SHM, r), t, owned=OWNED[r]) for r in (0, 1)]
before = buffer_file(SHM + ".r0")
for what, src in [("a tensor rank 1 owns", {**{n: t[n] for n in OWNED[0]},
                                             OWNED[1][0]: t[OWNED[1][0]]}),
                  ("an owned tensor missing", {n: t[n] for n in OWNED[0][1:]}),
                  ("the whole model", t)]:
    try:
        pubs[0].publish(src, 1)
        raise AssertionError("published with " + what)
    except bfpatch.LayoutError as x:
        print("ok - refused, %s: %s" % (what, x))
assert buffer_file(SHM + ".r0") == before, "a refused publish changed the buffer"
for v in (1, 2, 3, 4):
    t = step(t, v)
    for r in (1, 0):
        pubs[r].publish({n: t[n] for n in OWNED[r]}, v)
    if v == 3:
        continue  # 4 at once
    want = data_sha(t)
    end = time.monotonic() + 60
    while buffer_file(SHM + ".a")[0] < v and time.monotonic() < end:
        time.sleep(0.02)
    got = buffer_file(SHM + ".a")
    assert got == (v, want), (v, got, want)
    print("ok - version %d: 2 ranks -> lead -> shim, actor's buffer sha256 %s... equals the "
          "whole model's" % (v, want[:16]))
for p in pubs:
    p.close()
PYEOF
wait $PUB || fail "the lead exited with an error"
PUB=""
for v in 1 2 3 4; do
	grep -q "version $((v - 1)) -> $v from 2 ranks" "$T/lead.log" || fail "no version $v merged"
done
for v in 1 2; do
	grep -q "committed version $((v - 1)) -> $v" "$T/shim.log" || fail "no commit of version $v"
done
grep -q "owned (5 tensors)" "$T/rank0.log" || fail "rank 0 did not take PATH.owned"
grep "from 2 ranks" "$T/lead.log"
# the lead's patch holds keyframe-coded frames too (the rescale tensor):
# those are checked by applying them with an undo (PROTOCOL.md 5.3)
"$BFP" info "$T/v00000003-v00000004.bfp" > "$T/info.txt" 2>&1 || fail "bfpatch info"
grep -q "frames .*keyframe [1-9]" "$T/info.txt" || fail "no keyframe-coded frame: $(cat "$T/info.txt")"
echo "ok - 4 versions from 2 Python ranks (Publisher(owned=...)), bit-exact on the actor"
