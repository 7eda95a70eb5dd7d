"""The torch actor test's actor: its own instance of the model on a
device, kept at the trainer's version by scattering bfpatch's change
lists into its parameters at safe points between forward passes.

    actor.py DIR BUFFER VERSIONS [--device cpu]

It loads version 0 from the weight buffer (named_tensors(), a full
copy), then runs forward passes ("rollouts"); between two of them it
takes a safe point (buf.safe_point), and when a new version was
committed it applies the change lists since the version it holds
(buf.apply_changes) into its parameters, on their device. After each
version it checks, against the trainer's DIR/ref/V.pt (written by the
trainer, not read through bfpatch), that every parameter's bits equal
the trainer's BF16 parameters and that the output on the fixed inputs
equals the trainer's bit for bit; then it writes V to DIR/ack.

A second instance, the control, takes the same lists but skips the
scatter of the first version's: the checks must find it wrong at every
version after, or they would not see a change list missing.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPT, fixed_inputs  # noqa: E402
from trainer import NO_WAIT  # noqa: E402

from bfpatch import WeightBuffer  # noqa: E402

# versions after which the actor waits for the one after the next and
# applies both lists in one apply_changes (the trainer publishes them
# without waiting for the actor in between: trainer.NO_WAIT)
CHAIN = {v - 1 for v in NO_WAIT}
SKIP = 1  # the control skips this version's scatter


def new_model(device):
    m = GPT().to(device=device, dtype=torch.bfloat16)
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def params(m):
    """What apply_changes scatters into: the model's own tensors."""
    return dict(m.named_parameters())


def load_full(m, buf):
    """Copy every tensor of the buffer into the model (the reload)."""
    p = params(m)
    with torch.no_grad():
        for name, t in buf.named_tensors():
            p[name].copy_(t)


def check(m, ref, x):
    """(parameters that differ from the trainer's, output equal bit for bit)"""
    bad = [n for n, p in params(m).items()
           if not torch.equal(p.view(torch.int16).cpu(), ref["params"][n])]
    with torch.no_grad():
        out = m(x)
    return bad, torch.equal(out.view(torch.int16).cpu(), ref["out"])


def wait_ref(d, v, timeout=30):
    path = os.path.join(d, "ref", "%d.pt" % v)
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            sys.exit("actor: no %s from the trainer" % path)
        time.sleep(0.02)
    return torch.load(path)


def ack(d, v):
    tmp = os.path.join(d, "ack.tmp")
    with open(tmp, "w") as f:
        f.write(str(v))
    os.replace(tmp, os.path.join(d, "ack"))


def run_actor(d, path, versions, device="cpu", timeout=120):
    torch.set_num_threads(1)  # the trainer's forward runs the same reductions
    buf = WeightBuffer(path)
    model, control = new_model(device), new_model(device)
    x = fixed_inputs(model.vocab, model.pos.num_embeddings, device)
    end = time.monotonic() + timeout
    held = buf.safe_point(timeout=timeout)
    assert held == 0, "the buffer starts at version %d" % held
    load_full(model, buf)
    load_full(control, buf)
    bad, same = check(model, wait_ref(d, 0), x)
    assert not bad and same, "version 0 loaded from the buffer differs: %s" % bad[:3]
    print("ok - actor on %s: version 0 loaded, %d parameters bit-exact, output equal"
          % (device, sum(p.numel() for p in model.parameters())), flush=True)
    ack(d, 0)
    passes = lists = 0
    while held < versions:
        with torch.no_grad():  # a rollout on the version held
            model(x)
        passes += 1
        if time.monotonic() > end:
            sys.exit("actor: at version %d after %gs" % (held, timeout))
        if held in CHAIN and buf.version < held + 2:
            # let the next version be committed, and wait for the one
            # after it: the actor's own tensors hold version `held` meanwhile
            s = buf.staged
            if s > buf.version:
                buf.allow(min(s, held + 2))
            time.sleep(0.01)
            continue
        v = buf.safe_point(timeout=max(end - time.monotonic(), 0.1))
        if v == held:
            time.sleep(0.005)
            continue
        chain = buf.changes_since(held)
        assert [c.version for c in chain] and chain[-1].version == v, \
            "change lists from %d end at %s, not %d" % (held, [c.version for c in chain], v)
        got = buf.apply_changes(params(model), since=held)
        assert got == v, "apply_changes reached %d, the buffer is at %d" % (got, v)
        nchanged = sum(int(idx.numel()) for c in chain for idx, _ in c.values())
        if held + 1 != SKIP:
            buf.apply_changes(params(control), since=held)
        lists += len(chain)
        ref = wait_ref(d, v)
        bad, same = check(model, ref, x)
        assert not bad, "version %d: %d tensors differ from the trainer's, e.g. %s" \
            % (v, len(bad), bad[:3])
        assert same, "version %d: the output differs from the trainer's" % v
        cbad, csame = check(control, ref, x)
        assert cbad and not csame, "version %d: the control, without version %d's list, " \
            "passed the checks" % (v, SKIP)
        print("ok - version %d -> %d: %d change list(s), %d values scattered on %s; "
              "parameters bit-exact with the trainer's, output equal bit for bit "
              "(the control without version %d's list: %d tensors differ, output differs)"
              % (held, v, len(chain), nchanged, device, SKIP, len(cbad)), flush=True)
        held = v
        ack(d, v)
    print("ok - actor: %d versions in %d change lists between %d forward passes"
          % (held, lists, passes), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("buffer")
    ap.add_argument("versions", type=int)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    run_actor(a.dir, a.buffer, a.versions, a.device, a.timeout)


if __name__ == "__main__":
    main()
