"""A small GPT-style transformer in torch, for the torch actor test and
bench/bench_rl.py: token and position embeddings, pre-norm blocks of
causal self-attention and a GELU MLP, a final layer norm and an untied
output head. Every tensor of its state is a parameter (no buffers), so
its state_dict is the layout a bfpatch.Publisher publishes and the
actor's named_parameters() are what the change lists scatter into.

The RL-like trainer is here too: FP32 master weights, Adam at a small
learning rate, and a BF16 copy cast from the master after each step.
"""
import math

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
        q, k, v = (z.reshape(sh).transpose(1, 2) for z in (q, k, v))
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        a = a.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """layers blocks of width d; vocab tokens, ctx positions."""

    def __init__(self, layers=3, d=96, heads=4, ff=384, ctx=32, vocab=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.vocab = vocab
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) \
                    if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):  # trained-like biases, not all zero
                nn.init.normal_(p, 0.0, 0.01)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def fixed_inputs(vocab, ctx, device="cpu"):
    """The prompts both sides run: the same tokens on every machine."""
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab, (2, ctx), generator=g).to(device)


class Trainer:
    """FP32 master weights, Adam at an RL learning rate, and a BF16 copy
    (self.bf16, a model of the same shape) cast from the master after
    each step: the copy is what is published."""

    def __init__(self, seed, lr, **shape):
        torch.manual_seed(seed)
        self.master = GPT(**shape)
        self.bf16 = GPT(**shape).to(torch.bfloat16)
        for p in self.bf16.parameters():
            p.requires_grad_(False)
        self.opt = torch.optim.Adam(self.master.parameters(), lr=lr)
        self.gen = torch.Generator().manual_seed(seed + 1)
        self.shape = shape
        self.cast()

    def cast(self):
        with torch.no_grad():
            for (n, m), (n2, b) in zip(self.master.named_parameters(),
                                       self.bf16.named_parameters()):
                assert n == n2
                b.copy_(m)  # round to nearest even, as .to(torch.bfloat16)

    def step(self, batch=2, tokens=None):
        """One optimizer step on random token sequences (the gradient of a
        language-model loss: its direction matters, not its sense)."""
        ctx = tokens or self.master.pos.num_embeddings
        v = self.master.vocab
        x = torch.randint(0, v, (batch, ctx + 1), generator=self.gen)
        logits = self.master(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, v), x[:, 1:].reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.cast()
        return float(loss)

    def state(self):
        """name -> BF16 tensor, in the order of the model's parameters."""
        return dict(self.bf16.named_parameters())
