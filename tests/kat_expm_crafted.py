#!/usr/bin/env python3
"""kat_expm_crafted.py DRIVER: encoding 8 frames the reference encoder never
writes, made from docs/FORMAT.md 3.11 alone, against the codec.

An encoder written from the format text makes keyframe-expm payloads of
every range length from 1 to 39 (fewer values than the 17 the states
carry; the reference encoder writes a raw keyframe there), tables of up
to 64 exponent symbols with every clamp of the PM share, escapes and the
largest range, and, for each rule of 3.11 that a reference frame never
breaks, a payload that breaks only that rule (its values and so its
target hash are right): set padding bits after the raw fields or the bit
stream, a carried bit beyond the 7K of the carried values, a final state
of 2^30 or more above 2^23, a payload shorter than R + 16, range_len
8193. kat_check.py's decoder must agree with each verdict; then DRIVER
(kat_expm_probe.c) decodes every payload in a frame with libbfpatch, on
its vector and scalar paths, and must accept the valid ones with their
values and reject the others with BFP_E_CORRUPT, writing nothing.
"""
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kat_check as kc  # noqa: E402  (the independent decoder, its PM and w(q))


def zigzag(d):
    return 2 * d if d >= 0 else -2 * d - 1


class BitWriter:
    """LSB-first bit writer (FORMAT.md 3.1)."""

    def __init__(self):
        self.v, self.n = 0, 0

    def put(self, x, k):
        self.v |= x << self.n
        self.n += k

    def eg0(self, v):
        x = v + 1
        b = x.bit_length()
        self.put(0, b - 1)
        self.put(1, 1)
        self.put(x & ((1 << (b - 1)) - 1), b - 1)

    def data(self):
        return self.v.to_bytes((self.n + 7) // 8, "little")


def encode(vals, ns_cap, q=None, rnd=None, raw_pad=0, extra_carry=0,
           state_add=(0, 0, 0, 0), stream_pad=False):
    """A keyframe-expm payload of vals (FORMAT.md 3.11), with its table
    of at most ns_cap exponent symbols (weights q, or drawn by rnd), and
    optionally one rule broken: raw_pad (bits after the raw fields),
    extra_carry (carried bits beyond the values), state_add (added to the
    initial states: a final state out of range), stream_pad (a padding
    bit of the bit stream). None when the bit stream has no padding."""
    n = len(vals)
    carry = min(n, 17)
    nraw = n - carry
    es = [(v >> 7) & 0xFF for v in vals]
    ms = [(v >> 6) & 1 for v in vals]
    rs = [((v >> 9) & 0x40) | (v & 0x3F) for v in vals]
    etop = max(es)
    ns = min(ns_cap, etop + 1)
    t = etop - (ns - 1)
    if q is None:
        q = [rnd.randint(max(0, 20 - 3 * s), max(0, min(29, 22 - s))) for s in range(ns)]
    w = []
    for s in range(ns):
        ps = 58 if s == 0 else kc.PM[min(12, max(-2, q[s] - q[s - 1])) + 2]
        w += [kc.WEIGHTS[q[s]] * ps, kc.WEIGHTS[q[s]] * (64 - ps)]
    f, cum = kc.freqs(w)
    bw = BitWriter()
    bw.put(etop, 8)
    bw.eg0(ns - 1)
    bw.put(q[0], 5)
    for s in range(1, ns):
        bw.eg0(zigzag(q[s] - max(0, q[s - 1] - 2)))
    syms = []
    for e, m in zip(es, ms):
        s = min(etop - e, ns - 1)
        if s == ns - 1 and t > 0:
            bw.eg0(t - e)  # the escape, in value order
        syms.append(2 * s + m)
    if stream_pad:
        if bw.n % 8 == 0:
            return None
        bw.put(1, 8 - bw.n % 8)
    raw = raw_pad
    for i in range(nraw):
        raw |= rs[i] << (7 * i)
    carried = extra_carry
    for i in range(carry):
        carried |= rs[nraw + i] << (7 * i)
    x = [(1 << 23) + ((carried >> (30 * j)) & ((1 << 30) - 1)) + state_add[j] for j in range(4)]
    out = bytearray()
    for i in reversed(range(n)):  # value i into state x_(i mod 4), as in 3.6
        j, u = i % 4, syms[i]
        while x[j] >= f[u] << 20:
            out.append(x[j] & 0xFF)
            x[j] >>= 8
        x[j] = (x[j] // f[u]) * 2048 + x[j] % f[u] + cum[u]
    assert all((1 << 23) <= v < (1 << 31) for v in x)
    return (raw.to_bytes((7 * nraw + 7) // 8, "little") + bw.data() + bytes(out)
            + b"".join(v.to_bytes(4, "little") for v in x))


def values(rnd, n, top, lam=0.7):
    """n values below exponent top, each binade about half as full as the
    one above (lam), sign and mantissa random."""
    out = []
    for _ in range(n):
        e = top - min(int(rnd.expovariate(lam)), top)
        out.append((rnd.getrandbits(1) << 15) | (e << 7) | rnd.getrandbits(7))
    return out


def cases():
    rnd = random.Random(83)
    out = []

    def add(reject, label, vals, payload):
        if payload is None:
            return
        try:
            ok = kc.key_expm(payload, len(vals)) == vals
        except ValueError:
            ok = False
        if ok == reject:
            sys.exit("kat_check.py %s %s" % ("accepts" if ok else "rejects", label))
        out.append((reject, label, vals, payload))

    for n in list(range(1, 40)) + [63, 64, 65, 500]:
        for _ in range(3):
            v = values(rnd, n, rnd.randint(0, 140))
            add(0, "valid, %d values" % n, v, encode(v, rnd.choice([1, 2, 3, 6, 20, 64]), rnd=rnd))
    for d in (-9, -3, -2, 0, 5, 11, 12, 13, 20):  # weights d apart: every clamp
        q0 = 10 if d > 0 else 28
        q = [min(29, max(0, q0 + d * s)) for s in range(6)]
        v = values(rnd, 300, 120)
        add(0, "valid, weights %d apart" % d, v, encode(v, 6, q=q))
    v = [0x7F80 | rnd.getrandbits(7) for _ in range(50)] + values(rnd, 50, 254)
    add(0, "valid, exponent 255", v, encode(v, 64, rnd=rnd))
    v = values(rnd, 200, 63, 0.1)
    add(0, "valid, 64 symbols down to exponent 0", v, encode(v, 64, rnd=rnd))
    # the most values a frame holds: few exponents and top bits, to fit
    v = [(rnd.getrandbits(1) << 15) | ((120 if rnd.random() < 0.97 else 119) << 7)
         | rnd.getrandbits(6) for _ in range(8192)]
    add(0, "valid, 8192 values", v, encode(v, 2, q=[29, 10]))
    v = v + [v[0]]
    add(1, "range_len 8193", v, encode(v, 2, q=[29, 10]))
    for n in (18, 19, 21, 25, 100, 601):
        nraw = n - 17
        if 7 * nraw % 8:
            v = values(rnd, n, 120)
            top = 1 << (8 * ((7 * nraw + 7) // 8) - 1)
            add(1, "raw padding bit, %d values" % n, v, encode(v, 6, rnd=rnd, raw_pad=top))
    for n in (1, 5, 16, 17, 20, 100):
        v = values(rnd, n, 120)
        add(1, "carried bit 119, %d values" % n, v, encode(v, 6, rnd=rnd, extra_carry=1 << 119))
        if n < 17:
            add(1, "carried bit 7n, %d values" % n, v,
                encode(v, 6, rnd=rnd, extra_carry=1 << (7 * n)))
    for n in (3, 17, 100):
        for j in range(4):
            v = values(rnd, n, 120)
            add(1, "final state %d at 2^23 + 2^30, %d values" % (j, n), v,
                encode(v, 6, rnd=rnd, state_add=tuple(1 << 30 if k == j else 0 for k in range(4))))
    for n in (30, 31, 200):
        v = values(rnd, n, 120)
        add(1, "bit stream padding bit, %d values" % n, v, encode(v, 6, rnd=rnd, stream_pad=True))
    v = values(rnd, 100, 120)
    add(1, "payload of R + 15 bytes", v, encode(v, 6, rnd=rnd)[:(7 * 83 + 7) // 8 + 15])
    return out


def main():
    cs = cases()
    with tempfile.NamedTemporaryFile(prefix="expm-", suffix=".cases") as f:
        for reject, label, vals, p in cs:
            lb = label.encode()
            f.write(struct.pack("<BB", reject, len(lb)) + lb + struct.pack("<II", len(vals), len(p))
                    + p + struct.pack("<%dH" % len(vals), *vals))
        f.flush()
        print("%d crafted frames of encoding 8 (%d to reject); kat_check.py agrees" %
              (len(cs), sum(c[0] for c in cs)))
        sys.exit(subprocess.call([sys.argv[1], f.name]))


if __name__ == "__main__":
    main()
