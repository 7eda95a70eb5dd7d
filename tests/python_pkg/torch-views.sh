#!/bin/sh
# torch-views.sh BFPATCH SHIM BUILD_ROOT (set-up in lib.sh): a torch view
# of every safetensors dtype (I64, U8, BOOL, 0-d and empty tensors among
# them) has the tensor's shape, the torch dtype bfpatch.dtypes names, and
# the same bytes as the numpy view and the checkpoint file (read here
# independently); named_tensors() yields every tensor, in the order of
# the data, as torch views for an engine's load_weights().
set -u
. "$(dirname "$0")/lib.sh"
"$PY" -c "import torch" 2>/dev/null || { echo "skip: needs python3-torch"; exit 77; }
every_dtype "$T/ckpt.safetensors"
shim_buffer "$T/ckpt.safetensors"
"$PY" - "$SHM" "$T/ckpt.safetensors" <<'PYEOF' || exit 1
import json, struct, sys
import numpy as np
import torch
from bfpatch import WeightBuffer
d = open(sys.argv[2], "rb").read()
n = struct.unpack_from("<Q", d)[0]
meta = {k: v for k, v in json.loads(d[8:8 + n]).items() if k != "__metadata__"}
base = 8 + n
native = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
          "F64": torch.float64, "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16,
          "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}
# what this torch has for the rest, else the bits in a signed type as wide
more = {"U16": ("uint16", torch.int16), "U32": ("uint32", torch.int32),
        "U64": ("uint64", torch.int64), "F8_E4M3": ("float8_e4m3fn", torch.uint8),
        "F8_E5M2": ("float8_e5m2", torch.uint8)}
ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
buf = WeightBuffer(sys.argv[1])
assert set(buf.tensors) == set(meta)
for name in meta:
    t = buf.tensor(name, torch=True)
    m = meta[name]
    st = m["dtype"]
    want = native.get(st) or getattr(torch, more[st][0], more[st][1])
    assert isinstance(t, torch.Tensor) and t.dtype == want, (name, t.dtype, want)
    assert tuple(t.shape) == tuple(m["shape"]), (name, t.shape, m["shape"])
    b, e = m["data_offsets"]
    a = buf.tensor(name)  # numpy
    assert a.shape == tuple(m["shape"]) and a.tobytes() == d[base + b:base + e], name
    bits = t.view(ints[t.element_size()]) if t.dtype != torch.uint8 else t
    tb = bits.contiguous().numpy().tobytes()
    assert tb == a.tobytes() == d[base + b:base + e], name
    if st in native and st != "BF16":
        assert t.tolist() == a.tolist(), name
    print("ok - %-10s %-7s %-8s shape %-7s torch %s" % (name, st, "(0-d)" if t.dim() == 0 else "",
          tuple(t.shape), str(t.dtype).replace("torch.", "")))
order = [k for k, _ in sorted(meta.items(), key=lambda kv: kv[1]["data_offsets"])]
seen = [(k, t.dtype, t.data_ptr()) for k, t in buf.named_tensors()]
want = [(k, buf.tensor(k, torch=True).dtype, buf.tensor(k, torch=True).data_ptr()) for k in order]
assert [k for k, _, _ in seen] == order and seen == want, (seen, want)
print("ok - named_tensors(): %d (name, torch tensor) pairs in the order of the data" % len(seen))
PYEOF
echo "ok - torch views of every safetensors dtype equal numpy's and the checkpoint's bytes"
