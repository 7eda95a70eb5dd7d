"""check_buffer.py BUFFER STEP0 STEP1 MODULE_DIR: the Python view of a
weight buffer: every tensor's view holds the bytes the checkpoint file
holds (read independently), views are zero-copy (a write through one
taken with writable=True is in the file), and wait_version() returns
once the shim committed step 1, after which the same views show step 1's values. With python3-torch
installed, torch views are checked the same way (bfloat16, zero-copy);
TORCH=1 in the environment makes torch mandatory."""
import os
import struct
import sys

sys.path.insert(0, sys.argv[4])
import numpy as np  # noqa: E402
from bfpatch_buffer import WeightBuffer  # noqa: E402


def tensors_of(path):
    d = open(path, "rb").read()
    n = struct.unpack_from("<Q", d)[0]
    return d, 8 + n


def check_all(buf, path):
    d, base = tensors_of(path)
    for name, (dtype, shape, b, e) in buf.tensors.items():
        a = buf.tensor(name)
        assert a.shape == shape, (name, a.shape, shape)
        assert a.tobytes() == d[base + b:base + e], name
    return len(buf.tensors)


buf = WeightBuffer(sys.argv[1])
assert buf.version == 0
views = {name: buf.tensor(name, writable=True) for name in buf.tensors}
n = check_all(buf, sys.argv[2])
print("version 0: %d tensors equal the checkpoint" % n)
# zero-copy: a write through the view is in the file itself
name = next(iter(views))
old = int(views[name].flat[0])
views[name].flat[0] = old ^ 1
raw = open(sys.argv[1], "rb").read()
_, _, b, _ = buf.tensors[name]
assert struct.unpack_from("<H", raw, buf.data_offset + b)[0] == old ^ 1
views[name].flat[0] = old
print("views are zero-copy (a write lands in the buffer file)")
print("waiting for version 1 ...", flush=True)
v = buf.wait_version(after=0, timeout=60)
assert v == 1, v
n = buf.consistent(lambda: check_all(buf, sys.argv[3]))
# the views taken at version 0 now show version 1 (same memory)
d, base = tensors_of(sys.argv[3])
for name, a in views.items():
    _, _, b, e = buf.tensors[name]
    assert a.tobytes() == d[base + b:base + e], name
print("version 1: %d tensors equal the next checkpoint, seen through the old views" % n)
try:
    import torch
except ImportError:
    torch = None
    assert os.environ.get("TORCH") != "1", "TORCH=1 but python3-torch is missing"
    print("torch: not installed, torch views not checked")
if torch is not None:
    d, base = tensors_of(sys.argv[3])

    def check_torch():
        nt = 0
        for name, (dtype, shape, b, e) in buf.tensors.items():
            if dtype != "BF16":
                continue
            t = buf.tensor(name, torch=True)
            assert t.dtype == torch.bfloat16 and tuple(t.shape) == tuple(shape), name
            # the bit patterns, read without numpy, are the checkpoint's bytes
            assert t.view(torch.int16).contiguous().numpy().tobytes() == d[base + b:base + e], name
            nt += 1
        return nt
    nt = buf.consistent(check_torch)
    name = next(k for k, v in buf.tensors.items() if v[0] == "BF16")
    t = buf.tensor(name, torch=True)
    old = int(views[name].flat[0])
    views[name].flat[0] = old ^ 1  # a write through numpy is seen by torch
    assert int(t.view(torch.int16).flatten()[0]) & 0xFFFF == old ^ 1
    views[name].flat[0] = old
    print("torch %s: %d BF16 tensors as torch.bfloat16 views, equal to the checkpoint, "
          "sharing memory with the buffer" % (torch.__version__, nt))
