#!/bin/sh
# publish-from-memory.sh BFPATCH SHIM BUILD_ROOT (set-up in lib.sh): end to
# end from a trainer's memory. A Python "trainer" makes a weight buffer
# for its model (bfpatch.Publisher, numpy and torch tensors, BF16 among
# other dtypes, NaN payloads, -0 and subnormals among the bits) and
# commits 3 versions into it from memory; `bfpatch publish --buffer`
# sends each to a keyed bfpatch-shim, and after each the actor's buffer
# holds the trainer's bytes exactly (sha256 of the data section, read
# from the file here, not through the package). Tensors that are not the
# layout's (name, shape, dtype, a missing one, an old version) are
# refused before anything is written, publish() makes no copy of the
# model on the heap, and layouts from tensors, from a safetensors file
# and from save_safetensors() are one model.
set -u
. "$(dirname "$0")/lib.sh"
export BFPATCH_WBUF_LIB="$BUILD/publisher/libbfpatch_wbuf.so"
[ -f "$BFPATCH_WBUF_LIB" ] || { echo "FAIL: no $BFPATCH_WBUF_LIB"; exit 1; }
# a sanitizer build's library needs its runtime loaded first, and Python
# itself is not leak-free
asan=$(ldd "$BFPATCH_WBUF_LIB" | awk '/libasan/ {print $3}')
[ -z "$asan" ] || PY="env LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0 $PY"
cat > "$T/model.py" <<'PYEOF'
# the trainer's model, the same in each phase: version 0 from a seed,
# each next version from the one before (about 2% of the BF16 words one
# step up or down, integer arithmetic on the bits)
import hashlib, json, struct
import numpy as np
try:
    import torch
except ImportError:
    torch = None
SHAPES = [("embed.weight", (384, 256)), ("layers.0.attn.weight", (256, 256)),
          ("layers.0.mlp.weight", (512, 256)), ("norm.weight", (256,))]


def version0():
    rng = np.random.default_rng(11)
    t = {}
    for name, shape in SHAPES:
        f = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        t[name] = (f.view(np.uint32) >> 16).astype(np.uint16)  # BF16 bits, truncated
    # bits no float path may touch: NaN payloads, -0, subnormals, infinities
    for name in ("embed.weight", "norm.weight"):
        t[name].reshape(-1)[:6] = [0x7FC1, 0xFF81, 0x8000, 0x0001, 0x7F80, 0x807F]
    t["positions"] = np.arange(-3, 61, dtype=np.int64)
    t["scale"] = np.array(0x7F800001, dtype=np.uint32).view(np.float32)  # 0-d, an sNaN
    return t


def step(t, v):
    rng = np.random.default_rng(100 + v)
    out = dict(t)
    for name, _ in SHAPES:
        a = t[name].copy()
        flat = a.reshape(-1)
        idx = rng.choice(flat.size, flat.size // 50, replace=False)
        idx = idx[(flat[idx] & 0x7F80) != 0x7F80]  # leave NaN and infinity bits
        flat[idx] += np.where(rng.integers(0, 2, idx.size) == 1, 1, -1).astype(np.uint16)
        out[name] = a
    out["positions"] = t["positions"] + 1
    return out


def data_bytes(t):  # the data section: tensors in this order, as written below
    return b"".join(np.ascontiguousarray(a).tobytes() for a in t.values())


def write_safetensors(path, t):
    st = {np.dtype("<u2"): "BF16", np.dtype("<i8"): "I64", np.dtype("<f4"): "F32"}
    meta, at = {}, 0
    for name, a in t.items():
        meta[name] = {"dtype": st[a.dtype], "shape": list(a.shape),
                      "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    h = json.dumps(meta).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data_bytes(t))


def buffer_file(path):
    """(version, state, seq, sha256 of the data section) of a weight
    buffer, from its header (common/wbuf.h) and bytes"""
    d = open(path, "rb").read()
    data_off, nbytes = struct.unpack_from("<QQ", d, 48)
    version, state = struct.unpack_from("<II", d, 64)
    seq = struct.unpack_from("<Q", d, 80)[0]
    return version, state, seq, hashlib.sha256(d[data_off:data_off + nbytes]).hexdigest()


def as_sources(t):
    """what a trainer hands over: torch tensors (BF16 as torch.bfloat16,
    one a non-contiguous view) where torch is there, numpy arrays else"""
    if torch is None:
        return dict(t)
    s = dict(t)
    s["embed.weight"] = torch.from_numpy(t["embed.weight"].view(np.int16)).view(torch.bfloat16)
    wt = torch.from_numpy(np.ascontiguousarray(t["layers.0.mlp.weight"].T).view(np.int16))
    s["layers.0.mlp.weight"] = wt.view(torch.bfloat16).t()  # strided: the transpose's view
    s["positions"] = torch.from_numpy(t["positions"])
    return s
PYEOF
# 1. the trainer makes its buffer at version 0, and the checkpoint the actor starts from
$PY - "$T" "$SHM" <<'PYEOF' || exit 1
import os, sys
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SHM = sys.argv[1:3]
t = version0()
write_safetensors(T + "/step-0000.safetensors", t)
with bfpatch.Publisher(SHM + ".t", as_sources(t)) as pub:
    assert pub.version == 0
    with bfpatch.Publisher(SHM + ".f", T + "/step-0000.safetensors") as pf:
        assert pf.model_id == pub.model_id, "a layout from tensors and from a file differ"
    pub.save_safetensors(T + "/saved.safetensors")
    with bfpatch.Publisher(SHM + ".s", T + "/saved.safetensors") as ps:
        assert ps.model_id == pub.model_id, "save_safetensors() wrote another layout"
sha0 = __import__("hashlib").sha256(data_bytes(t)).hexdigest()
assert buffer_file(SHM + ".t")[3] == buffer_file(SHM + ".f")[3] == sha0
assert buffer_file(SHM + ".s")[3] == sha0, "save_safetensors() wrote other values"
os.unlink(SHM + ".f")
os.unlink(SHM + ".s")
print("ok - trainer buffer made at version 0 from %d tensors (torch: %s)"
      % (len(t), torch is not None and torch.__version__))
PYEOF
# 2. a keyed shim (the actor), and the publisher on the trainer's buffer
"$SHIM" $K --buffer "$SHM.a" --init "$T/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 1)) --exit-after 90 > "$T/shim.log" 2>&1 &
PIDS="$!"
"$BFP" publish $K --buffer "$SHM.t" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
	--linger 2 > "$T/publish.log" 2>&1 &
PUB=$!
# 3. three versions from memory, each checked on the actor before the next
$PY - "$T" "$SHM" <<'PYEOF' || fail "publishing from memory"
import hashlib, sys, time, tracemalloc
sys.path.insert(0, sys.argv[1])
from model import *
import bfpatch
T, SHM = sys.argv[1:3]
t = version0()
pub = bfpatch.Publisher(SHM + ".t", as_sources(t))  # exists: its layout must be this one
# refused before anything is written
bad = [("a name not in the layout", {**as_sources(t), "extra": np.zeros(2, np.int64)}),
       ("another shape", {**t, "norm.weight": t["norm.weight"][:-1]}),
       ("float32 for BF16", {**t, "norm.weight": t["norm.weight"].astype(np.float32)}),
       ("int32 for I64", {**t, "positions": t["positions"].astype(np.int32)}),
       ("a tensor missing", {k: v for k, v in t.items() if k != "scale"})]
if torch is not None:
    bad.append(("torch float32 for BF16",
                {**t, "embed.weight": torch.zeros(384, 256, dtype=torch.float32)}))
before = buffer_file(SHM + ".t")
for what, src in bad:
    try:
        pub.publish(src, 1)
        raise AssertionError("published with " + what)
    except bfpatch.LayoutError as x:
        print("ok - refused, %s: %s" % (what, x))
assert buffer_file(SHM + ".t") == before, "a refused publish changed the buffer"
for v in (1, 2, 3):
    t = step(t, v)
    want = hashlib.sha256(data_bytes(t)).hexdigest()
    src = as_sources(t)
    tracemalloc.start()
    pub.publish(src, v)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < len(data_bytes(t)) // 8, "publish() allocated %d bytes" % peak
    assert buffer_file(SHM + ".t") == (v, 0, 2 * v, want), buffer_file(SHM + ".t")
    end = time.monotonic() + 30
    while buffer_file(SHM + ".a")[0] < v and time.monotonic() < end:
        time.sleep(0.02)
    got = buffer_file(SHM + ".a")
    assert got[:2] == (v, 0) and got[3] == want, (v, got, want)
    print("ok - version %d: trainer -> publish --buffer -> shim, actor's buffer sha256 %s... "
          "equals the trainer's tensors" % (v, want[:16]))
try:
    pub.publish(as_sources(t), 3)
    raise AssertionError("version 3 published twice")
except ValueError as x:
    print("ok - refused, an old version: %s" % x)
pub.close()
PYEOF
wait $PUB || fail "bfpatch publish --buffer"
PUB=""
grep -q " -> 3: " "$T/publish.log" || fail "publish --buffer did not publish version 3"
for v in 1 2 3; do
	grep -q "committed version $((v - 1)) -> $v" "$T/shim.log" || fail "no commit of version $v"
done
grep " -> [123]: " "$T/publish.log"
echo "ok - 3 versions published from a Python trainer's memory, bit-exact on the actor"
