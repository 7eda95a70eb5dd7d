#!/usr/bin/env python3
"""check_buffers.py CHECKPOINT BUFFER...: every bfpatch-shim weight buffer
holds exactly the checkpoint's data (sha256 of the bytes, with hashlib,
independent of the codec), is not mid-commit, and, when the checkpoint
name is step-NNNN.safetensors, is at version NNNN. Also a module: the
readers below serve tests/check_served.py."""
import hashlib
import re
import struct
import sys


def checkpoint_sha(path):
    """sha256 of a safetensors file's data section."""
    d = open(path, "rb").read()
    return hashlib.sha256(d[8 + struct.unpack_from("<Q", d)[0]:]).digest()


def read_buffer(path):
    """(version, state, seq, sha256 of the parameters) of a weight buffer
    (common/wbuf.h)."""
    b = open(path, "rb").read()
    if b[:8] != b"BFPWBUF1":
        sys.exit("%s: not a weight buffer" % path)
    version, state = struct.unpack_from("<II", b, 64)
    seq = struct.unpack_from("<Q", b, 80)[0]
    off, n = struct.unpack_from("<QQ", b, 48)
    return version, state, seq, hashlib.sha256(b[off:off + n]).digest()


def main():
    ck = sys.argv[1]
    want = checkpoint_sha(ck)
    m = re.search(r"step-(\d+)\.safetensors$", ck)
    ok = True
    for path in sys.argv[2:]:
        version, state, _, sha = read_buffer(path)
        same = sha == want
        good = same and state == 0 and (not m or version == int(m.group(1)))
        print("%s: version %d, state %d, sha256 %s" % (path, version, state,
              "equals the trainer's" if same else "DIFFERS"))
        ok &= good
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
