#!/usr/bin/env python3
"""tree_peers.py: kernel-socket peers for the two-relay tree test.

  send PATCH A_IP                 send every frame of PATCH to relay A
  receive P1 P2 B_IP A_IP         two receivers JOIN relay B; they NACK all
                                  of P1 (which only A holds: B must forward
                                  the NACK upstream), then P2 is sent to A
                                  and must reach them through B unasked
Every receiver must end with every frame of P1 and P2, byte-identical.
"""
import select
import socket
import struct
import sys
import time

from tap_peers import ctl, frames, ranges_of

DATA, CTL = 7400, 7401


def send(path, relay):
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("198.18.0.10", 7399))
    for f in frames(path):
        tx.sendto(f, (relay, DATA))
        time.sleep(0.0005)


def collect(rx, want, deadline, nack=None):
    got = [dict() for _ in rx]
    last = 0.0
    while time.time() < deadline and any(any(k not in g for k in want) for g in got):
        if nack and time.time() - last > 1.0:
            nack(got)
            last = time.time()
        r, _, _ = select.select(rx, [], [], 0.2)
        for s in r:
            pkt = s.recv(65535)
            key = struct.unpack_from("<II", pkt, 20)  # target version, index
            got[rx.index(s)][key] = pkt
    return got


def receive(p1, p2, relay_b, relay_a):
    f1, f2 = frames(p1), frames(p2)
    model = struct.unpack_from("<Q", f1[0], 8)[0]
    v1 = struct.unpack_from("<I", f1[0], 20)[0]
    rx, cs = [], []
    for i in range(2):
        ip = "198.18.0.%d" % (11 + i)
        d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        d.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        d.bind((ip, 7500))
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.bind((ip, 7501))
        c.sendto(ctl(1, model, v1 - 1, data_port=7500), (relay_b, CTL))
        rx.append(d)
        cs.append(c)
    time.sleep(1.0)

    def nack(got):
        for i, c in enumerate(cs):
            ranges = ranges_of([k for k in range(len(f1)) if (v1, k) not in got[i]])
            if ranges:
                c.sendto(ctl(3, model, v1, ranges=ranges[:128]), (relay_b, CTL))

    want1 = {(v1, k): f for k, f in enumerate(f1)}
    got1 = collect(rx, want1, time.time() + 30, nack)
    ok = True
    for i, g in enumerate(got1):
        same = all(g.get(k) == f for k, f in want1.items())
        print("receiver %d: patch 1 by NACK through B to A: %d of %d frames%s"
              % (i + 1, len([k for k in want1 if k in g]), len(want1),
                 ", byte-identical" if same else ", MISMATCH"))
        ok &= same
    v2 = struct.unpack_from("<I", f2[0], 20)[0]
    want2 = {(v2, k): f for k, f in enumerate(f2)}
    send(p2, relay_a)
    got2 = collect(rx, want2, time.time() + 30)
    for i, g in enumerate(got2):
        same = all(g.get(k) == f for k, f in want2.items())
        print("receiver %d: patch 2 pushed A -> B -> receiver: %d of %d frames%s"
              % (i + 1, len([k for k in want2 if k in g]), len(want2),
                 ", byte-identical" if same else ", MISMATCH"))
        ok &= same
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3])
    else:
        receive(*sys.argv[2:6])
