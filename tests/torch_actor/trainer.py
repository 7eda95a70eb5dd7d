"""The torch actor test's trainer: FP32 master weights, Adam at lr 1e-6,
a BF16 copy published after each step with bfpatch.Publisher.

    trainer.py DIR BUFFER VERSIONS [--rank R --ranks N] [--init-only]

Version 0 is the model as initialised (seeded), v the model after v
optimizer steps. Before publishing v it writes DIR/ref/v.pt with
torch.save: the BF16 parameters' bit patterns (int16 views) and the
BF16 model's output on the fixed inputs, as bits: the independent copy
the actor compares with. It publishes v only once the actor has loaded
v - 1 (DIR/ack holds the last version the actor loaded), except after
the versions in NO_WAIT: there two versions follow each other and the
actor takes them in one chain.

With --ranks N every rank trains the same model (same seed, same data:
a replicated trainer) and publishes the tensors it owns, the rank-th of
N slices of the layout by tensor name, into its own buffer (Publisher
with owned=); the lead (bfpatch publish --ranks) joins them. Rank 0
writes the references and the actors' first checkpoint.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Trainer, fixed_inputs  # noqa: E402

import bfpatch  # noqa: E402

LR = 1e-6
# after these versions the trainer does not wait for the actor's ack:
# the next version follows at once and the actor takes both in one chain
NO_WAIT = {3}


def owned(names, rank, ranks):
    """The rank-th of ranks contiguous slices of the layout's names."""
    k = len(names)
    return names[rank * k // ranks:(rank + 1) * k // ranks]


def atomic_save(obj, path):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    torch.save(obj, tmp)
    os.replace(tmp, path)


def reference(tr, x):
    with torch.no_grad():
        out = tr.bf16(x)
    return {"params": {n: p.detach().view(torch.int16).clone() for n, p in tr.state().items()},
            "out": out.view(torch.int16).clone()}


def acked(d):
    try:
        with open(os.path.join(d, "ack")) as f:
            return int(f.read() or -1)
    except (OSError, ValueError):
        return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("buffer")
    ap.add_argument("versions", type=int)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=90)
    a = ap.parse_args()
    torch.set_num_threads(1)  # the actor's forward runs the same reductions
    tr = Trainer(seed=5, lr=LR)
    x = fixed_inputs(tr.master.vocab, tr.master.pos.num_embeddings)
    state = tr.state()
    names = list(state)
    mine = owned(names, a.rank, a.ranks)
    os.makedirs(os.path.join(a.dir, "ref"), exist_ok=True)
    if a.ranks == 1:
        pub = bfpatch.Publisher(a.buffer, state)
    else:
        pub = bfpatch.Publisher(a.buffer, state, owned=mine)
    if a.rank == 0:
        pub.save_safetensors(os.path.join(a.dir, "step-0000.safetensors"))
        atomic_save(reference(tr, x), os.path.join(a.dir, "ref", "0.pt"))
    n = sum(p.numel() for p in state.values())
    print("trainer rank %d/%d: %d parameters in %d tensors (%d published here), lr %g"
          % (a.rank, a.ranks, n, len(names), len(mine), LR), flush=True)
    prev = {k: v.view(torch.int16).clone() for k, v in state.items()}
    for v in range(1, a.versions + 1):
        loss = tr.step()
        state = tr.state()
        changed = sum(int((state[k].view(torch.int16) != prev[k]).sum()) for k in state)
        prev = {k: t.view(torch.int16).clone() for k, t in state.items()}
        if a.rank == 0:
            atomic_save(reference(tr, x), os.path.join(a.dir, "ref", "%d.pt" % v))
        end = time.monotonic() + a.timeout
        while v - 1 not in NO_WAIT and acked(a.dir) < v - 1:
            if time.monotonic() > end:
                sys.exit("trainer rank %d: the actor did not load version %d in %gs"
                         % (a.rank, v - 1, a.timeout))
            time.sleep(0.02)
        if a.ranks == 1:
            pub.publish(state, version=v)
        else:
            pub.publish({k: state[k] for k in mine}, version=v)
        print("trainer rank %d: version %d published, loss %.4f, %.2f%% of the BF16 values "
              "changed" % (a.rank, v, loss, 100.0 * changed / n), flush=True)
    pub.close()


if __name__ == "__main__":
    main()
