#!/usr/bin/env python3
"""tap_peers.py PATCH RELAY_IP: kernel-socket peers of bfpatch-relay.

Runs inside the test's network namespace, on the kernel side of the
relay's net_tap interface. Three receivers (198.18.0.11-13) JOIN the relay
over its control port; a sender pushes every frame of PATCH to the relay's
data port; receiver 3 throws away every 5th frame on purpose and NACKs
what it misses; the repairs must come from the relay's cache. Every
receiver must end with every frame byte-identical. The control messages
are built here from docs/PROTOCOL.md, independently of the relay's code.
"""
import os
import select
import socket
import struct
import sys
import time

DATA, CTL = 7400, 7401
RX_PORT, RX_CTL = 7500, 7501

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kat_check import crc32c  # noqa: E402  (the independent CRC32C)


def ranges_of(missing):
    """Sorted frame indices -> NACK ranges [first, count]."""
    ranges = []
    for m in missing:
        if ranges and ranges[-1][0] + ranges[-1][1] == m:
            ranges[-1][1] += 1
        else:
            ranges.append([m, 1])
    return [tuple(r) for r in ranges]


def ctl(kind, model, version, data_port=0, rate=0, ranges=()):
    body = b"".join(struct.pack("<II", f, n) for f, n in ranges)
    hdr = struct.pack("<IBBHQIII", 0x43504642, 1, kind, data_port, model, version,
                      rate, len(ranges))
    m = hdr + body
    return m + struct.pack("<I", crc32c(m))


def receiver(rcvbuf=16 << 20, timeout=0.1):
    """a UDP socket on a free loopback port for a test's subscriber"""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    return s


def frames_for(s, seconds, quiet):
    """the frames s receives for up to seconds, until none came for quiet
    seconds"""
    got, end, last = [], time.monotonic() + seconds, time.monotonic()
    while time.monotonic() < end and time.monotonic() - last < quiet:
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        if d[:4] == b"BFPT":
            got.append(d)
            last = time.monotonic()
    return got


def join(s, port, version, model=0, rate=0):
    """s JOINs the publisher or relay at 127.0.0.1:port (s's port for data;
    rate: its link in kbit/s, 0 for none)"""
    s.sendto(ctl(1, model, version, data_port=s.getsockname()[1], rate=rate),
             ("127.0.0.1", port))


def frames(path):
    d = open(path, "rb").read()
    out, at = [], 0
    while at < len(d):
        pl = struct.unpack_from("<I", d, at + 44)[0]
        out.append(d[at:at + 60 + pl])
        at += 60 + pl
    return out


def main():
    fr = frames(sys.argv[1])
    relay = sys.argv[2]
    model, target = struct.unpack_from("<Q", fr[0], 8)[0], struct.unpack_from("<I", fr[0], 20)[0]
    rx, cs = [], []
    for i in range(3):
        ip = "198.18.0.%d" % (11 + i)
        d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        d.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        d.bind((ip, RX_PORT))
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.bind((ip, RX_CTL))
        rx.append(d)
        cs.append(c)
    for c in cs:
        c.sendto(ctl(1, model, target - 1, data_port=RX_PORT), (relay, CTL))
    time.sleep(1.0)  # JOINs and ARP settle
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("198.18.0.10", 7399))
    for f in fr:
        tx.sendto(f, (relay, DATA))
        time.sleep(0.0005)  # the kernel->tap path takes ~80 kpps
    got = [dict() for _ in range(3)]
    thrown = 0
    seen3 = set()
    deadline = time.time() + 30
    nacks = 0
    last_nack = 0.0
    while time.time() < deadline and any(len(g) < len(fr) for g in got):
        r, _, _ = select.select(rx, [], [], 0.2)
        for s in r:
            i = rx.index(s)
            pkt = s.recv(65535)
            idx = struct.unpack_from("<I", pkt, 24)[0]
            if i == 2 and idx % 5 == 0 and idx not in seen3:
                seen3.add(idx)  # the first copy is lost on purpose
                thrown += 1
                continue
            got[i][idx] = pkt
        if len(got[2]) < len(fr) and time.time() - last_nack > 0.5 and \
                sum(len(g) for g in got[:2]) == 2 * len(fr):
            ranges = ranges_of(sorted(set(range(len(fr))) - set(got[2])))
            cs[2].sendto(ctl(3, model, target, ranges=ranges[:128]), (relay, CTL))
            nacks += 1
            last_nack = time.time()
    ok = True
    for i, g in enumerate(got):
        same = all(g.get(k) == f for k, f in enumerate(fr))
        print("receiver %d: %d of %d frames%s" % (i + 1, len(g), len(fr),
                                                 ", byte-identical" if same else ", MISMATCH"))
        ok &= same
    print("receiver 3 threw away %d frames, sent %d NACK(s)" % (thrown, nacks))
    for c in cs:
        c.sendto(ctl(2, model, target), (relay, CTL))
    sys.exit(0 if ok and thrown > 0 else 1)


if __name__ == "__main__":
    main()
