#!/usr/bin/env python3
"""make_shards.py SRC.safetensors OUTDIR N [--index-meta K=V]... [--shard-meta I:K=V]...
Write SRC's tensors as a Hugging Face sharded checkpoint in OUTDIR (made
if missing): model-0000K-of-0000N.safetensors, each holding the next run
of tensors in SRC's data order, and model.safetensors.index.json with
{"metadata": {"total_size": ...}, "weight_map": {...}}. The shards'
data sections concatenated are SRC's data section, so the checkpoint has
SRC's parameter space (docs/FORMAT.md 1). Written with the standard
library alone, independent of bfpatch."""
import json
import os
import struct
import sys


def main():
    src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    index_meta, shard_meta = {}, {}
    args = sys.argv[4:]
    for flag, val in zip(args[::2], args[1::2]):
        k, v = val.split("=", 1)
        if flag == "--index-meta":
            index_meta[k] = v
        elif flag == "--shard-meta":
            i, k = k.split(":", 1)
            shard_meta.setdefault(int(i), {})[k] = v
        else:
            sys.exit("unknown option " + flag)
    d = open(src, "rb").read()
    hl = struct.unpack_from("<Q", d)[0]
    hdr = json.loads(d[8:8 + hl])
    data = d[8 + hl:]
    tensors = sorted(((k, v) for k, v in hdr.items() if k != "__metadata__"),
                     key=lambda kv: kv[1]["data_offsets"])
    per = -(-len(tensors) // n)
    os.makedirs(out, exist_ok=True)
    weight_map = {}
    for s in range(n):
        part = tensors[s * per:(s + 1) * per]
        name = "model-%05d-of-%05d.safetensors" % (s + 1, n)
        base = part[0][1]["data_offsets"][0]
        h = {}
        if s in shard_meta:
            h["__metadata__"] = shard_meta[s]
        for k, v in part:
            b, e = v["data_offsets"]
            h[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [b - base, e - base]}
            weight_map[k] = name
        j = json.dumps(h, separators=(",", ":")).encode()
        j += b" " * (-len(j) % 8)
        end = part[-1][1]["data_offsets"][1]
        with open(os.path.join(out, name), "wb") as f:
            f.write(struct.pack("<Q", len(j)) + j + data[base:end])
    meta = {"total_size": len(data)}
    meta.update(index_meta)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": meta, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
