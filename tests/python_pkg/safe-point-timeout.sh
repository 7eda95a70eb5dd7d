#!/bin/sh
# safe-point-timeout.sh BFPATCH SHIM BUILD_ROOT (set-up in lib.sh): one
# timeout behaviour. With no shim on the buffer (none ever started, or
# one that staged a version and died) safe_point(timeout=...) raises
# TimeoutError, the type consistent() and wait_version() raise when their
# timeout passes, and says no shim runs; with a shim running and nothing
# staged it returns the version at once.
set -u
. "$(dirname "$0")/lib.sh"
every_dtype "$T/ckpt.safetensors"
shim_buffer "$T/ckpt.safetensors"
"$PY" - "$SHM" "$SHIM" "$T/key" "$T/ckpt.safetensors" "$port" <<'PYEOF' || exit 1
import os, shutil, struct, subprocess, sys, time
from bfpatch import WeightBuffer
path, shim, key, ckpt, port = sys.argv[1:6]


def raises(fn, what):
    t0 = time.monotonic()
    try:
        r = fn()
    except Exception as x:
        dt = time.monotonic() - t0
        assert 0.25 <= dt < 3, (what, dt)
        print("ok - %s raised %s after %.2fs: %s" % (what, type(x).__name__, dt, x))
        return type(x), str(x)
    raise AssertionError("%s returned %r" % (what, r))


def poke(p, off, fmt, v):
    with open(p, "r+b") as f:
        f.seek(off)
        f.write(struct.pack(fmt, v))


buf = WeightBuffer(path)
assert buf.version == 0
sp, msg = raises(lambda: buf.safe_point(timeout=0.3), "safe_point(timeout=0.3), no shim")
assert "no bfpatch-shim" in msg and buf.writer is None, msg
wv, _ = raises(lambda: buf.wait_version(after=0, timeout=0.3), "wait_version(timeout=0.3)")
# a commit that never ends: state COMMITTING (68), sequence odd (80)
shutil.copy(path, path + ".stuck")
poke(path + ".stuck", 68, "<I", 1)
poke(path + ".stuck", 80, "<Q", 1)
stuck = WeightBuffer(path + ".stuck")
co, _ = raises(lambda: stuck.consistent(lambda: 0, timeout=0.3), "consistent(timeout=0.3)")
assert sp is co is wv is TimeoutError, (sp, co, wv)
# a shim that staged version 1 (staged at 88) and died before it committed
poke(path, 88, "<I", 1)
assert buf.staged == 1
raises(lambda: buf.safe_point(timeout=0.3), "safe_point(timeout=0.3), version 1 staged, no shim")
assert buf.version == 0
poke(path, 88, "<I", 0)
poke(path, 92, "<I", 0)
# a shim running, nothing staged: the version at once
p = subprocess.Popen([shim, "--key", key, "--buffer", path, "--init", ckpt, "--upstream",
                      "127.0.0.1:%s" % port, "--listen", "127.0.0.1:%d" % (int(port) + 2),
                      "--commit", "safe-point", "--exit-after", "20"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    end = time.monotonic() + 10
    while buf.writer is None and time.monotonic() < end:
        time.sleep(0.02)
    assert buf.writer == p.pid, (buf.writer, p.pid)
    t0 = time.monotonic()
    assert buf.safe_point(timeout=5) == 0
    print("ok - with a shim (pid %d) and nothing staged safe_point() returned version 0 in %.3fs"
          % (p.pid, time.monotonic() - t0))
finally:
    p.terminate()
    p.wait()
raises(lambda: buf.safe_point(timeout=0.3), "safe_point(timeout=0.3) once that shim ended")
PYEOF
echo "ok - safe_point() without a shim raises TimeoutError, as consistent() and wait_version() do"
