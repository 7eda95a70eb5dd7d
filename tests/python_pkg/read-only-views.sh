#!/bin/sh
# read-only-views.sh BFPATCH SHIM BUILD_ROOT (set-up in lib.sh): views of a
# weight buffer are read-only unless asked for with writable=True: a write
# through a numpy view raises and one through a torch view ends its
# process (SIGSEGV) before it reaches the buffer, whose bytes stay as
# they were; writable=True views write into the file, and need a buffer
# opened writable.
set -u
. "$(dirname "$0")/lib.sh"
every_dtype "$T/ckpt.safetensors"
shim_buffer "$T/ckpt.safetensors"
"$PY" - "$SHM" <<'PYEOF' || exit 1
import hashlib, subprocess, sys
import numpy as np
from bfpatch import WeightBuffer
path = sys.argv[1]
sha = lambda: hashlib.sha256(open(path, "rb").read()).hexdigest()
before = sha()
buf = WeightBuffer(path)
n = 0
for name in buf.tensors:
    a = buf.tensor(name)
    if a.size == 0:
        continue
    for write in (lambda: a.__setitem__(() if a.ndim == 0 else (0,) * a.ndim, 1),
                  lambda: a.fill(0), lambda: a.setflags(write=True)):
        try:
            write()
            raise AssertionError("a write into %s went through" % name)
        except ValueError:
            n += 1
assert sha() == before, "the buffer changed"
assert all(isinstance(a, np.ndarray) and not a.flags.writeable
           for _, a in buf.named_tensors(torch=False))
print("ok - %d writes through read-only numpy views raised ValueError; buffer unchanged" % n)
# torch has no read-only tensors: the page protection stops the write
code = ("import sys; from bfpatch import WeightBuffer; b = WeightBuffer(sys.argv[1]); "
        "t = b.tensor('embed.bf16', torch=True); t[0, 0] = 1.0; print('written')")
r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True)
assert r.returncode == -11 and "written" not in r.stdout, (r.returncode, r.stdout, r.stderr)
assert sha() == before, "a torch write reached the buffer"
print("ok - a write through a read-only torch view ends its process with SIGSEGV; buffer unchanged")
# asked for: writable views, zero-copy
w = buf.tensor("pos.i64", writable=True)
assert w.flags.writeable
old = int(w[0])
w[0] = old ^ 0x5A5A
_, _, b, _ = buf.tensors["pos.i64"]
raw = open(path, "rb").read()
assert int.from_bytes(raw[buf.data_offset + b:buf.data_offset + b + 8], "little", signed=True) == old ^ 0x5A5A
w[0] = old
t = buf.tensor("keep.bool", torch=True, writable=True)
t[0] = not bool(t[0])
t[0] = not bool(t[0])
assert sha() == before
print("ok - writable=True views write into the buffer file (numpy and torch)")
ro = WeightBuffer(path, writable=False)
try:
    ro.tensor("pos.i64", writable=True)
    raise AssertionError("a writable view of a buffer opened read-only")
except PermissionError:
    print("ok - writable=True on a buffer opened writable=False raises PermissionError")
PYEOF
echo "ok - views are read-only by default; writable=True is explicit"
