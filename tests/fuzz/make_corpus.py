#!/usr/bin/env python3
"""make_corpus.py: seed corpora for the fuzz harnesses, from the KAT vectors
and a synthetic safetensors header. Run from the repository root:
    python3 tests/fuzz/make_corpus.py build/cli/bfpatch
"""
import os
import struct
import subprocess
import sys
import tempfile

root = "tests/fuzz/corpus"
for d in ("frame", "safetensors", "patch"):
    os.makedirs(f"{root}/{d}", exist_ok=True)

kat = "tests/kat"
for f in sorted(os.listdir(kat)):
    if not f.endswith(".patch"):
        continue
    data = open(f"{kat}/{f}", "rb").read()
    name = f[:-6]
    open(f"{root}/patch/{name}", "wb").write(data)
    at, i = 0, 0
    while at < len(data):
        pl = struct.unpack_from("<I", data, at + 44)[0]
        frame = data[at:at + 60 + pl]
        # byte 0: mode (1 = recompute CRC, 2 = 100001-parameter weights)
        open(f"{root}/frame/{name}-{i}", "wb").write(b"\x03" + frame)
        open(f"{root}/frame/{name}-{i}-scalar", "wb").write(b"\x83" + frame)
        if frame[5] == 5:  # a frame that carries a model: kept for the ones after it
            model = frame
        elif frame[5] == 6 and i < 4:  # (bit 6: the model's frame first)
            open(f"{root}/frame/{name}-{i}-model", "wb").write(b"\x43" + model + frame)
        at += 60 + pl
        i += 1

with tempfile.TemporaryDirectory() as t:
    subprocess.run([sys.argv[1], "synth", "-o", t, "-p", "20k", "-n", "0"],
                   check=True, stderr=subprocess.DEVNULL)
    data = open(f"{t}/step-0000.safetensors", "rb").read()
    n = struct.unpack_from("<Q", data)[0]
    open(f"{root}/safetensors/synth-header", "wb").write(data[:8 + n + 64])
small = b'{"__metadata__":{"a":"b"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
open(f"{root}/safetensors/small", "wb").write(struct.pack("<Q", len(small)) + small + bytes(8))
print("corpus written under", root)
