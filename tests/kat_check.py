#!/usr/bin/env python3
"""kat_check.py KAT_DIR: an independent decoder of docs/FORMAT.md.

Written from the format document, sharing no code with the C codec: it
parses every frame of each NAME.patch, checks header rules and CRC32C,
decodes sparse, dense and keyframe payloads bit by bit, applies them to
NAME.base and requires the result to equal NAME.target byte for byte.
(The XXH3 range hash is not recomputed: Python's stdlib lacks XXH3.)
"""
import os
import struct
import sys

POLY = 0x82F63B78
TABLE = []
for b in range(256):
    c = b
    for _ in range(8):
        c = (c >> 1) ^ (POLY if c & 1 else 0)
    TABLE.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for x in data:
        crc = (crc >> 8) ^ TABLE[(crc ^ x) & 0xFF]
    return crc ^ 0xFFFFFFFF


class Bits:
    """LSB-first bit reader (FORMAT.md 3.1)."""

    def __init__(self, data):
        self.v = int.from_bytes(data, "little")
        self.n = len(data) * 8
        self.pos = 0

    def get(self, k):
        if self.pos + k > self.n:
            raise ValueError("read past the payload")
        r = (self.v >> self.pos) & ((1 << k) - 1)
        self.pos += k
        return r

    def unary(self, limit):
        q = 0
        while q < limit and self.get(1) == 0:
            q += 1
        return q

    def rice(self, k):
        q = self.unary(24)
        if q == 24:
            return self.get(32)
        return (q << k) | self.get(k)

    def eg0(self):
        z = self.unary(33)
        if z > 32:
            raise ValueError("eg0 too long")
        return ((1 << z) | self.get(z)) - 1


def key(x):
    return (~x & 0xFFFF) if x & 0x8000 else (x | 0x8000)


def unkey(k):
    return (k & 0x7FFF) if k & 0x8000 else (~k & 0xFFFF)


def cls(x):
    e = (x >> 7) & 0xFF
    return 0 if e <= 108 else (15 if e >= 123 else e - 108)


def newval(b, sign, m):
    if m >= 32768 and not sign:
        raise ValueError("non-canonical +32768")
    d = (0x10000 - m) if sign else m
    return unkey((key(b) + d) & 0xFFFF)


def eg(bits, k):
    return (bits.eg0() << k) | bits.get(k)


def sparse(bits, base):
    n, gs, ms = [], [], []
    for c in range(16):
        n.append(bits.eg0())
        g = m = None
        if n[c]:
            runs = bits.get(1)
            g = dict(runs=runs, k=bits.get(5), kr=bits.get(5) if runs else 0)
            runs = bits.get(1)
            m = dict(runs=runs, k=bits.get(4))
            if runs:
                m["M"] = bits.eg0() + 1
                m["kr"] = bits.get(5)
        gs.append(g)
        ms.append(m)
    out = {}
    for c in range(16):
        if not n[c]:
            continue
        members = [i for i, x in enumerate(base) if cls(x) == c]
        # gaps: plain Rice, or runs of zero gaps then Rice(g - 1)
        gaps, due, run = [], True, 0
        for j in range(n[c]):
            if not gs[c]["runs"]:
                gaps.append(bits.rice(gs[c]["k"]))
                continue
            if due:
                run = bits.rice(gs[c]["kr"])
                if run > n[c] - j:
                    raise ValueError("gap run too long")
                due = False
            if run > 0:
                run -= 1
                gaps.append(0)
            else:
                gaps.append(bits.rice(gs[c]["k"]) + 1)
                due = True
        pos, r = [], -1
        for g in gaps:
            r += g + 1
            pos.append(members[r])  # IndexError: past the range
        # magnitudes: plain EG(k) of m - 1, or runs of M then the others
        due, run = True, 0
        for j in range(n[c]):
            mm = ms[c]
            if mm["runs"] and due:
                run = bits.rice(mm["kr"])
                if run > n[c] - j:
                    raise ValueError("magnitude run too long")
                due = False
            sign = bits.get(1)
            if mm["runs"] and run > 0:
                run -= 1
                m = mm["M"]
            else:
                v = eg(bits, mm["k"])
                m = v + 1 if (not mm["runs"] or v + 1 < mm["M"]) else v + 2
                if m > 32768:
                    raise ValueError("magnitude too large")
                due = True
            out[pos[j]] = newval(base[pos[j]], sign, m)
    return out


def dense(bits, base):
    out = {}
    for i, b in enumerate(base):
        if bits.get(1):
            sign = bits.get(1)
            m = bits.eg0() + 2 if bits.get(1) else 1
            out[i] = newval(b, sign, m)
    return out


def check(d, name):
    base = list(struct.unpack("<%dH" % (os.path.getsize(f"{d}/{name}.base") // 2),
                              open(f"{d}/{name}.base", "rb").read()))
    target = open(f"{d}/{name}.target", "rb").read()
    patch = open(f"{d}/{name}.patch", "rb").read()
    w = list(base)
    at = 0
    idx = 0
    covered = 0
    count = None
    while at < len(patch):
        h = patch[at:at + 60]
        (magic, ver, enc, flags, model, bv, tv, fi, fc, rb, rl, pl, th,
         crc) = struct.unpack("<IBBHQIIIIQIIQI", h)
        assert magic == 0x54504642 and ver == 1 and flags == 0, "header"
        assert fi == idx and fc > fi and (count is None or count == fc), "index"
        count = fc
        payload = patch[at + 60:at + 60 + pl]
        assert len(payload) == pl, "truncated"
        assert crc32c(payload, crc32c(h[:56])) == crc, "crc"
        assert rl > 0 and rb + rl <= len(base), "range"
        assert rb == covered, "frames must tile the model in order"
        seg = w[rb:rb + rl]
        if enc == 3:
            assert bv == 0 and pl == 2 * rl
            vals = struct.unpack("<%dH" % rl, payload)
            w[rb:rb + rl] = vals
        elif enc in (1, 2):
            assert tv > bv
            bits = Bits(payload)
            ch = sparse(bits, seg) if enc == 1 else dense(bits, seg)
            assert (bits.pos + 7) // 8 == pl, "payload length"
            assert bits.get(pl * 8 - bits.pos) == 0, "padding"
            for i, v in ch.items():
                w[rb + i] = v
        else:
            raise AssertionError("encoding %d" % enc)
        covered += rl
        at += 60 + pl
        idx += 1
    assert idx == count and covered == len(base), "coverage"
    assert struct.pack("<%dH" % len(w), *w) == target, "result differs from target"
    print(f"ok   - {name}: {idx} frames decoded independently, result equals target")


def main():
    d = sys.argv[1]
    names = sorted(f[:-6] for f in os.listdir(d) if f.endswith(".patch"))
    if not names:
        sys.exit("no vectors in " + d)
    for n in names:
        check(d, n)


if __name__ == "__main__":
    main()
