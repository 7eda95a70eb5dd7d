#!/usr/bin/env python3
"""kat_check.py KAT_DIR: an independent decoder of docs/FORMAT.md.

Written from the format document, sharing no code with the C codec: it
parses every frame of each NAME.patch, checks header rules and CRC32C,
decodes sparse (encodings 1, 5 and 6), dense and keyframe payloads bit by
bit (the rANS part of encodings 5 to 8 byte by byte, the Huffman streams of
encoding 9 bit by bit), applies them to
NAME.base and requires the result to equal NAME.target byte for byte.
(The XXH3 range hash is not recomputed: Python's stdlib lacks XXH3.)
"""
import bisect
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

    def level(self, lv):
        """Gap code of level lv (FORMAT.md 3.1)."""
        k = (lv + 1) // 2
        if lv == 0 or lv % 2 == 1:
            return self.rice(k)
        m, cut = 3 << (k - 1), 1 << (k - 1)
        q = self.unary(24)
        if q == 24:
            return self.get(32)
        x = self.get(k)
        if x >= cut:
            x = 2 * x - cut + self.get(1)
        return q * m + x

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


def unfold(v, c, down):
    """FORMAT.md 3.4: a magnitude from its folded value."""
    low = c - 1
    if v == 0:
        return c
    if v > 2 * low:
        return c + (v - low)
    if down:
        v = v + 1 if v % 2 == 1 else v - 1
    return c + (v + 1) // 2 if v % 2 == 1 else c - v // 2


def unzigzag(z):
    return -(z + 1) // 2 if z & 1 else z // 2


def mag_code(bits, below=None):
    """A magnitude code (FORMAT.md 3.4); with below, class c - 1's code,
    C and k as their zigzag distances from its prediction."""
    code = dict(all=0, k=0, down=0, kr=0)
    if below is None:
        code["C"] = bits.eg0() + 1
    else:
        code["C"] = max(1, below["C"] // 2) + unzigzag(bits.eg0())
    if not 1 <= code["C"] <= 32768:
        raise ValueError("common magnitude out of range")
    code["runs"] = bits.get(1)
    if code["runs"]:
        code["all"] = bits.get(1)
    if not code["all"]:
        if below is None:
            code["k"] = bits.get(4)
        else:
            code["k"] = max(0, below["k"] - 1) + unzigzag(bits.eg0())
            if not 0 <= code["k"] <= 15:
                raise ValueError("magnitude order out of range")
        if code["C"] > 1:
            code["down"] = bits.get(1)
    if code["runs"] and not code["all"]:
        code["kr"] = bits.get(4)
    return code


def gap_fields(bits, c, g0):
    """A class's gap fields (FORMAT.md 3.5, 3.6)."""
    g = dict(runs=bits.get(1), kr=0)
    g["k"] = min(max(g0 + 2 * c, 0), 62) + unzigzag(bits.eg0())
    if not 0 <= g["k"] <= 62:
        raise ValueError("gap level out of range")
    if g["runs"]:
        g["kr"] = bits.get(4)
    return g


def class_header(bits, c, g0, default, below):
    """A self-contained class header after its count (FORMAT.md 3.5);
    below: class c - 1's magnitude code when it has changes, else None."""
    g = gap_fields(bits, c, g0)
    return g, dict(default) if bits.get(1) else mag_code(bits, below)


# FORMAT.md 3.6: symbol weights on a half-octave scale
WEIGHTS = [round(2 ** (q / 2 + 2)) for q in range(30)]


def table(bits):
    """A magnitude table (FORMAT.md 3.6) and its frequencies out of 2048."""
    e, sb = bits.get(3), bits.get(2)
    if e > 6 or sb > 2 or sb > e:
        raise ValueError("table shape")
    nsym = (1 << e) + ((15 - e) << sb)
    ns = bits.eg0() + 1
    if ns > nsym:
        raise ValueError("table symbols")
    q = [bits.get(5)]
    for _ in range(ns - 1):
        q.append(q[-1] + unzigzag(bits.eg0()))
    if not all(0 <= x <= 29 for x in q):
        raise ValueError("table weight")
    w = [WEIGHTS[x] for x in q]
    f = [max(1, x * 2048 // sum(w)) for x in w]
    top = f.index(max(f))
    f[top] += 2048 - sum(f)
    if f[top] < 1:
        raise ValueError("table frequencies")
    cum = [sum(f[:i]) for i in range(ns)]
    return dict(e=e, sb=sb, ns=ns, nsym=nsym, f=f, cum=cum)


def model_section(bits):
    """The model section of an encoding 5 payload (FORMAT.md 3.6)."""
    g0 = bits.get(7) - 64
    default = mag_code(bits)
    kc, gs, ms, tabs = [], [], [], []
    for c in range(16):
        kc.append(bits.get(4))
        gs.append(gap_fields(bits, c, g0))
        if bits.get(1):
            tabs.append(table(bits))
            ms.append(dict(default))
        else:
            tabs.append(None)
            below = ms[c - 1] if c and tabs[c - 1] is None else None
            ms.append(dict(default) if bits.get(1) else mag_code(bits, below))
    return gs, ms, kc, tabs


class Rans:
    """The rANS part at the end of an encoding 5 or 6 payload: a 32-bit
    state in its last 4 bytes, then bytes read backwards."""

    def __init__(self, payload):
        if len(payload) < 4:
            raise ValueError("no rANS state")
        self.buf, self.p = payload, len(payload) - 4
        self.x = int.from_bytes(payload[self.p:], "little")
        if not (1 << 23) <= self.x < (1 << 31):
            raise ValueError("rANS state out of range")

    def symbol(self, t):
        slot = self.x & 2047
        s = bisect.bisect_right(t["cum"], slot) - 1
        self.x = t["f"][s] * (self.x >> 11) + slot - t["cum"][s]
        while self.x < (1 << 23):
            if self.p == 0:
                raise ValueError("rANS part runs out")
            self.p -= 1
            self.x = (self.x << 8) | self.buf[self.p]
        return s


def table_magnitude(bits, rans, t):
    """A table-coded magnitude: its symbol from the rANS part, then in the
    bit stream the escape (last symbol) and the raw low bits."""
    s = rans.symbol(t)
    if s == t["ns"] - 1:
        s += bits.eg0()
        if s >= t["nsym"]:
            raise ValueError("table symbol out of range")
    e, sb = t["e"], t["sb"]
    if s < (1 << e) - 1:
        return s + 1
    u = s - ((1 << e) - 1)
    sh = e + (u >> sb) - sb
    m = (((1 << sb) | (u & ((1 << sb) - 1))) << sh) + bits.get(sh)
    if m > 32768:
        raise ValueError("magnitude too large")
    return m


def headers_self_contained(bits):
    """A self-contained payload's own fields and class headers (3.5)."""
    kn = bits.get(3)
    g0 = bits.get(7) - 64
    default = mag_code(bits)
    n, gs, ms = [], [], []
    for c in range(16):
        n.append(eg(bits, kn))
        g = m = None
        if n[c]:
            g, m = class_header(bits, c, g0, default, ms[c - 1] if c and n[c - 1] else None)
        gs.append(g)
        ms.append(m)
    return n, gs, ms


def sparse(bits, base, enc, model=None, payload=None):
    """The changes of a sparse payload, and the length of its rANS part."""
    if enc in (5, 6):  # counts in the model's order per class
        gs, ms, kc, tabs = model
        n = [eg(bits, k) for k in kc]
    else:
        n, gs, ms = headers_self_contained(bits)
        tabs = [None] * 16
    rans = Rans(payload) if any(n[c] and tabs[c] for c in range(16)) else None
    deferred = []  # the first 23 table-coded changes: signs in the state
    if sum(n) > len(base) or sum(n) > 35760:
        raise ValueError("too many changes")
    out = {}
    for c in range(16):
        if not n[c]:
            continue
        members = [i for i, x in enumerate(base) if cls(x) == c]
        # gaps: plain, or runs of zero gaps then the others less one
        gaps, due, run = [], True, 0
        for j in range(n[c]):
            if not gs[c]["runs"]:
                gaps.append(bits.level(gs[c]["k"]))
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
                gaps.append(bits.level(gs[c]["k"]) + 1)
                due = True
        pos, r = [], -1
        for g in gaps:
            r += g + 1
            pos.append(members[r])  # IndexError: past the range
        # magnitudes: all equal; plain; or runs of the common one, then
        # the others, folded around the common one
        if tabs[c]:
            for j in range(n[c]):
                sign = bits.get(1) if len(deferred) >= 23 else None
                m = table_magnitude(bits, rans, tabs[c])
                if sign is None:
                    deferred.append((pos[j], m))
                    continue
                if m == 32768 and not sign:
                    raise ValueError("+32768")
                out[pos[j]] = newval(base[pos[j]], sign, m)
            continue
        mm = ms[c]
        common = mm["C"]
        due, run = True, 0
        for j in range(n[c]):
            if mm["runs"] and not mm["all"] and due:
                run = bits.rice(mm["kr"])
                if run > n[c] - j:
                    raise ValueError("magnitude run too long")
                due = False
            sign = bits.get(1)
            if mm["all"]:
                m = common
            elif mm["runs"] and run > 0:
                run -= 1
                m = common
            else:
                v = eg(bits, mm["k"])
                m = unfold(v + mm["runs"], common, mm["down"])
                if m > 32768:
                    raise ValueError("magnitude too large")
                due = True
            out[pos[j]] = newval(base[pos[j]], sign, m)
    if not rans:
        return out, 0
    signs = rans.x - (1 << 23)
    if not 0 <= signs < (1 << len(deferred)):
        raise ValueError("rANS final state")
    for i, (p, m) in enumerate(deferred):
        sign = (signs >> i) & 1
        if m == 32768 and not sign:
            raise ValueError("+32768")
        out[p] = newval(base[p], sign, m)
    return out, len(payload) - rans.p


def dense(bits, base):
    out = {}
    for i, b in enumerate(base):
        if bits.get(1):
            sign = bits.get(1)
            m = bits.eg0() + 2 if bits.get(1) else 1
            out[i] = newval(b, sign, m)
    return out


def exp_table(bits):
    """The exponent table of encodings 7 and 8 (FORMAT.md 3.10): etop,
    ns and the weights q_0 .. q_(ns-1)."""
    etop = bits.get(8)
    ns = bits.eg0() + 1
    if ns > 64 or ns > etop + 1:
        raise ValueError("table symbols")
    q = [bits.get(5)]
    for _ in range(ns - 1):
        q.append(max(0, q[-1] - 2) + unzigzag(bits.eg0()))
    if not all(0 <= x <= 29 for x in q):
        raise ValueError("table weight")
    return etop, ns, q


def freqs(w):
    """Frequencies out of 2048 and first slots from weights (3.6, 3.11)."""
    f = [max(1, x * 2048 // sum(w)) for x in w]
    top = f.index(max(f))
    f[top] += 2048 - sum(f)
    if f[top] < 1:
        raise ValueError("table frequencies")
    return f, [sum(f[:i]) for i in range(len(f))]


def exponent(s, etop, ns, bits):
    """The exponent of exponent symbol s (FORMAT.md 3.10): etop - s, or for
    the last symbol t = etop - (ns - 1) less its escape from bits."""
    t = etop - (ns - 1)
    if s < ns - 1:
        return etop - s
    if t == 0:
        return 0
    e = bits.eg0()
    if e > t:
        raise ValueError("escape below exponent 0")
    return t - e


def rans_values(payload, bits, start, n, f, cum, etop, ns, per, state_bits):
    """Encodings 7 and 8 (FORMAT.md 3.10): n symbols with four interleaved
    states, each with its exponent (exponent symbol u // per, per = 2 when
    each has two symbols; escapes from the bit stream); the
    checks on the bytes read, the padding and the final states; returns
    the symbols, the exponents and the carried bit string."""
    send = len(payload) - 16
    x = [int.from_bytes(payload[send + 4 * j:send + 4 * j + 4], "little") for j in range(4)]
    if not all((1 << 23) <= v < (1 << 31) for v in x):
        raise ValueError("rANS state out of range")
    at = send  # the next rANS byte is payload[at - 1]
    syms, exps = [], []
    for i in range(n):
        j = i % 4
        slot = x[j] & 2047
        u = bisect.bisect_right(cum, slot) - 1
        x[j] = f[u] * (x[j] >> 11) + slot - cum[u]
        while x[j] < (1 << 23):
            if at == 0:
                raise ValueError("rANS bytes run out")
            at -= 1
            x[j] = (x[j] << 8) | payload[at]
        syms.append(u)
        exps.append(exponent(u // per, etop, ns, bits))
    end = start + (bits.pos + 7) // 8
    if bits.get((8 - bits.pos % 8) % 8) != 0:
        raise ValueError("padding")
    if at != end:
        raise ValueError("rANS bytes are not those after the bit stream")
    carried = 0
    for j in range(4):
        if x[j] - (1 << 23) >= 1 << state_bits:
            raise ValueError("rANS final state")
        carried |= (x[j] - (1 << 23)) << (state_bits * j)
    return syms, exps, carried


def key_exp(payload, n):
    """Encoding 7 (FORMAT.md 3.10): exponents through rANS with the
    frame's table, sign and mantissa as raw bytes, four states."""
    if n > 8192:
        raise ValueError("too many values")
    carry = min(n, 8)
    nraw = n - carry
    p = len(payload)
    if p < nraw + 16:
        raise ValueError("payload too short")
    bits = Bits(payload[nraw:p - 16])
    etop, ns, q = exp_table(bits)
    f, cum = freqs([WEIGHTS[x] for x in q])
    _, exps, carried = rans_values(payload, bits, nraw, n, f, cum, etop, ns, 1, 16)
    if carried >> (8 * carry):
        raise ValueError("carried bits beyond the values")
    raw = list(payload[:nraw]) + [(carried >> (8 * k)) & 0xFF for k in range(carry)]
    return [((r & 0x80) << 8) | (e << 7) | (r & 0x7F) for r, e in zip(raw, exps)]


# FORMAT.md 3.11: the share out of 64 of an exponent symbol's weight that
# goes to its half with mantissa top bit 0, by d = q_s - q_(s-1) (-2..12)
PM = [32, 33, 34, 35, 39, 39, 40, 45, 45, 45, 48, 54, 54, 54, 54]


def expm_weights(ns, q):
    """The weights of the 2 ns symbols of encodings 8 and 9 (FORMAT.md
    3.11): each exponent symbol's split by its share PM."""
    w = []
    for s in range(ns):
        ps = 58 if s == 0 else PM[min(12, max(-2, q[s] - q[s - 1])) + 2]
        w += [WEIGHTS[q[s]] * ps, WEIGHTS[q[s]] * (64 - ps)]
    return w


def key_expm(payload, n):
    """Encoding 8 (FORMAT.md 3.11): exponent and mantissa top bit through
    rANS (two symbols per exponent symbol, split by PM), sign and the low
    six mantissa bits as 7-bit raw fields, four states carrying 30 bits."""
    if n > 8192:
        raise ValueError("too many values")
    carry = min(n, 17)
    nraw = n - carry
    rlen = (7 * nraw + 7) // 8
    p = len(payload)
    if p < rlen + 16:
        raise ValueError("payload too short")
    rawbits = int.from_bytes(payload[:rlen], "little")
    if rawbits >> (7 * nraw):
        raise ValueError("raw section padding")
    bits = Bits(payload[rlen:p - 16])
    etop, ns, q = exp_table(bits)
    f, cum = freqs(expm_weights(ns, q))
    syms, exps, carried = rans_values(payload, bits, rlen, n, f, cum, etop, ns, 2, 30)
    if carried >> (7 * carry):
        raise ValueError("carried bits beyond the values")
    raw = rawbits | (carried << (7 * nraw))
    out = []
    for i in range(n):
        r = (raw >> (7 * i)) & 0x7F
        out.append(((r & 0x40) << 9) | (exps[i] << 7) | ((syms[i] & 1) << 6) | (r & 0x3F))
    return out




HALVED = []  # the tables whose code needed its frequencies halved


def huf_lengths(f):
    """Code lengths by FORMAT.md 3.12's construction, at most 11 bits."""
    g = list(f)
    while True:
        leaves = sorted(range(len(g)), key=lambda u: (g[u], u))
        nodes = []  # the merged nodes' weights, in the order made
        parent = {}
        li = ni = 0

        def take():
            nonlocal li, ni
            if li < len(leaves) and (ni >= len(nodes) or g[leaves[li]] <= nodes[ni]):
                li += 1
                return ("leaf", leaves[li - 1]), g[leaves[li - 1]]
            ni += 1
            return ("node", ni - 1), nodes[ni - 1]

        for _ in range(len(g) - 1):
            a, wa = take()
            b, wb = take()
            parent[a] = parent[b] = ("node", len(nodes))
            nodes.append(wa + wb)
        lens = []
        for u in range(len(g)):
            d, x = 0, ("leaf", u)
            while x in parent:
                d, x = d + 1, parent[x]
            lens.append(d)
        if max(lens) <= 11:
            return lens
        HALVED.append(len(g))
        g = [(x + 1) // 2 for x in g]


def key_huf(payload, n):
    """Encoding 9 (FORMAT.md 3.12): encoding 8's symbols through a Huffman
    code the table's frequencies give, in four streams that take bytes at
    the start of each group of 16 values; the streams' last bits carry
    the last raw fields; then raw fields and escapes in one bit stream."""
    if n > 8192:
        raise ValueError("too many values")
    bits = Bits(payload)
    etop, ns, q = exp_table(bits)
    if bits.get((8 - bits.pos % 8) % 8) != 0:
        raise ValueError("table padding")
    at = bits.pos // 8
    lens = huf_lengths(freqs(expm_weights(ns, q))[0])
    codes, code, prev = {}, 0, None
    for u in sorted(range(2 * ns), key=lambda u: (lens[u], u)):
        if prev is not None:
            code = (code + 1) << (lens[u] - prev)
        codes[(lens[u], code)] = u
        prev = lens[u]
    held = [[] for _ in range(4)]  # each stream's bits not yet used
    syms = []
    for g in range(0, n, 16):
        for j in range(4):
            k = (63 - len(held[j])) // 8
            if at + k > len(payload):
                raise ValueError("a take beyond the payload")
            for b in payload[at:at + k]:
                held[j] += [(b >> (7 - x)) & 1 for x in range(8)]
            at += k
        for i in range(g, min(n, g + 16)):
            h, c, ln = held[i % 4], 0, 0
            while (ln, c) not in codes:
                c, ln = (c << 1) | h[ln], ln + 1
            syms.append(codes[(ln, c)])
            del h[:ln]
    string = [b for h in held for b in h]
    carry = min(n, len(string) // 7)
    if any(string[7 * carry:]):
        raise ValueError("bits after the carried fields")
    nraw = n - carry
    tail = Bits(payload[at:])
    raw = [tail.get(7) for _ in range(nraw)]
    for t in range(carry):
        raw.append(int("".join(map(str, string[7 * t:7 * t + 7])), 2))
    exps = [exponent(u // 2, etop, ns, tail) for u in syms]
    if tail.get((8 - tail.pos % 8) % 8) != 0:
        raise ValueError("padding")
    if tail.pos // 8 != len(payload) - at:
        raise ValueError("payload length")
    return [((r & 0x40) << 9) | (e << 7) | ((u & 1) << 6) | (r & 0x3F)
            for r, e, u in zip(raw, exps, syms)]


def check(d, name):
    base = list(struct.unpack("<%dH" % (os.path.getsize(f"{d}/{name}.base") // 2),
                              open(f"{d}/{name}.base", "rb").read()))
    target = open(f"{d}/{name}.target", "rb").read()
    patch = open(f"{d}/{name}.patch", "rb").read()
    w = list(base)
    at = 0
    idx = 0
    models = {}  # frame index -> the model an encoding 5 frame carried
    covered = 0
    count = None
    patch_base = None
    while at < len(patch):
        h = patch[at:at + 60]
        (magic, ver, enc, flags, model, bv, tv, fi, fc, rb, rl, pl, th,
         crc) = struct.unpack("<IBBHQIIIIQIIQI", h)
        assert magic == 0x54504642 and ver == 1 and flags in (0, 1), "header"
        # flags bit 0 (IN_PATCH): a keyframe-coded frame of the patch
        assert not flags or enc in (3, 4, 7, 8, 9), "IN_PATCH on a delta frame"
        if enc in (1, 2, 5, 6) or flags:
            assert patch_base is None or bv == patch_base, "one base per patch"
            patch_base = bv
        assert fi == idx and fc > fi and (count is None or count == fc), "index"
        count = fc
        payload = patch[at + 60:at + 60 + pl]
        assert len(payload) == pl, "truncated"
        assert crc32c(payload, crc32c(h[:56])) == crc, "crc"
        assert rl > 0 and rb + rl <= len(base), "range"
        assert rb == covered, "frames must tile the model in order"
        seg = w[rb:rb + rl]
        if enc == 3:
            assert (tv > bv if flags else bv == 0) and pl == 2 * rl
            vals = struct.unpack("<%dH" % rl, payload)
            w[rb:rb + rl] = vals
        elif enc in (7, 8, 9):
            assert tv > bv if flags else bv == 0
            w[rb:rb + rl] = {7: key_exp, 8: key_expm, 9: key_huf}[enc](payload, rl)
        elif enc in (1, 2, 5, 6):
            assert tv > bv
            bits = Bits(payload)
            model = None
            if enc == 5:
                model = model_section(bits)
                models[idx] = model
            elif enc == 6:
                back = bits.eg0()
                assert back < idx, "model reference before frame 0"
                model = models[idx - back - 1]  # KeyError: no model there
            if enc == 2:
                ch, tail = dense(bits, seg), 0
            else:
                ch, tail = sparse(bits, seg, enc, model, payload)
            end = pl - tail  # the bit stream ends where the rANS part starts
            assert (bits.pos + 7) // 8 == end, "payload length"
            assert bits.get(end * 8 - bits.pos) == 0, "padding"
            for i, v in ch.items():
                w[rb + i] = v
        else:
            raise AssertionError("encoding %d" % enc)
        covered += rl
        at += 60 + pl
        idx += 1
    assert idx == count and covered == len(base), "coverage"
    assert struct.pack("<%dH" % len(w), *w) == target, "result differs from target"
    halved = f" ({len(HALVED)} codes limited)" if HALVED else ""
    HALVED.clear()
    print(f"ok   - {name}: {idx} frames decoded independently, result equals target{halved}")


def main():
    d = sys.argv[1]
    names = sorted(f[:-6] for f in os.listdir(d) if f.endswith(".patch"))
    if not names:
        sys.exit("no vectors in " + d)
    for n in names:
        check(d, n)


if __name__ == "__main__":
    main()
