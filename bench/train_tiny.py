#!/usr/bin/python3
"""train_tiny.py OUT.safetensors [--steps N] [--seed S]

Trains a small byte-level GPT (4 layers, width 256, about 3.3M parameters)
for a few hundred AdamW steps on this machine's Python sources and writes
its weights as BF16 safetensors: trained-like weights for the keyframe
rows of bench_codec (--weights). Trained weights differ from the synthetic
generator's in what keyframes code: per-tensor scales (embeddings,
projections scaled by depth, norm gains near 1, biases spread over many
binades) and tails shaped by training, which set the exponent's entropy.
Deterministic for a seed on one machine; needs Debian's python3-torch.
"""
import argparse
import glob
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, ff), nn.Linear(ff, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        sh = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(sh).transpose(1, 2) for z in (q, k, v))
        a = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        a = a.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers=4, d=256, heads=4, ff=1024, ctx=128, vocab=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def corpus():
    data = bytearray()
    for f in sorted(glob.glob(sys.base_prefix + "/lib/python3*/*.py")):
        data += open(f, "rb").read()
        if len(data) > 8 << 20:
            break
    return torch.frombuffer(bytes(data), dtype=torch.uint8).long()


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, t in tensors:
        raw = t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    data = corpus()
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    ctx, batch = 64, 8
    for step in range(a.steps):
        lr = 1e-3 * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        i = torch.randint(0, len(data) - ctx - 1, (batch,))
        x = torch.stack([data[j:j + ctx] for j in i])
        y = torch.stack([data[j + 1:j + ctx + 1] for j in i])
        loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == a.steps - 1:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    write_safetensors(a.out, sorted(model.named_parameters()))
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.out}: {n} parameters")


if __name__ == "__main__":
    main()
