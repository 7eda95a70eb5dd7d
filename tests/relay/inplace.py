#!/usr/bin/env python3
"""inplace.py: input and check of inplace_test.sh (fan-out 1: the output
made in the frame's own headroom, or of the received frame itself when
the cache holds a copy already; the repair cache left intact).

  gen [--twice] FRAMES.pcap IN.pcap [KEYFILE]
      IN.pcap: every frame of FRAMES.pcap (`bfpatch pcap`, to the relay),
      with --twice all of them again (each then a copy the cache holds:
      the relay sends the received mbuf itself), then subscriber B (198.18.0.12, control port 7501) JOINs for data
      port 7500 and NACKs every frame; with KEYFILE (B's peer key) JOIN
      and NACK are signed under it, fresh, the NACK bound to the frames'
      run
  check [--twice] [--fan2] FRAMES.pcap OUT.pcap [A=KEYFILE [A2=KEYFILE] B=KEYFILE]
      the static subscriber A (198.18.0.11:7500), alone while the frames
      came (--fan2: with A2, 198.18.0.11:7502), got every frame exactly
      once (--twice: twice), and B (from the cache, by its NACK) exactly
      once, with valid checksums: byte-identical, or with keys
      each frame's trailer signed again under that subscriber's key and
      under no other's, bound to the frames' run
Packets as cases.py builds them; the trailer from authtool.py.
"""
import os
import socket
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import authtool  # noqa: E402
from cases import mac, sub  # noqa: E402
from pcaptool import outputs, read_pcap, udp_parts, write_pcap  # noqa: E402
from tap_peers import ctl  # noqa: E402

A = ("198.18.0.11", 7500)
A2 = ("198.18.0.11", 7502)
B = ("198.18.0.12", 7500)


def gen(frames_pcap, out, keyfile=None, twice=False):
    pk = read_pcap(frames_pcap)
    fr = [udp_parts(p)[4] for p in pk]
    model = struct.unpack_from("<Q", fr[0], 8)[0]
    target = struct.unpack_from("<I", fr[0], 20)[0]
    join = ctl(1, model, 0, data_port=B[1])
    nack = ctl(3, model, target, ranges=[(0, len(fr))])
    if keyfile:
        kid, key = authtool.read_key(keyfile)
        run = struct.unpack_from("<Q", fr[0], len(fr[0]) - authtool.LEN + 8)[0]
        now = int(time.time() * 1e6)
        join = authtool.seal(kid, key, join, 0, now)
        nack = authtool.seal(kid, key, nack, run, now + 1000)
    b = lambda m: sub(m, ip=B[0], smac=mac(0x12))  # noqa: E731
    write_pcap(out, pk * (2 if twice else 1) + [b(join), b(nack)])


def check(frames_pcap, out, keymap, twice=False, fan2=False):
    keys = {}
    for item in keymap:
        who, kf = item.split("=")
        keys[{"A": A, "A2": A2, "B": B}[who]] = authtool.read_key(kf)
    frames, runs = [], set()
    for p in read_pcap(frames_pcap):
        d = udp_parts(p)[4]
        if keys:
            runs.add(struct.unpack_from("<Q", d, len(d) - authtool.LEN + 8)[0])
            d = d[:-authtool.LEN]
        frames.append(d)
    got, bad = ({A: [], A2: [], B: []} if fan2 else {A: [], B: []}), 0
    for _, u in outputs(out):
        if not u:
            bad += 1
            continue
        dest = (socket.inet_ntoa(u[1]), u[3])
        if dest not in got:
            continue  # control messages to B's control port
        d = u[4]
        if keys:
            kid, key = keys[dest]
            o = authtool.open_(kid, key, d)
            for other, (k2, key2) in keys.items():
                if other != dest and authtool.open_(k2, key2, d) is not None:
                    bad += 1
            if o is None or o[1] not in runs or o[2] != 0:
                bad += 1
                continue
            d = o[0]
        got[dest].append(d)
    ok = not bad
    for dest, pl in got.items():
        want = frames * (2 if twice and dest != B else 1)
        if sorted(pl) != sorted(want):
            print("FAIL: %s:%d got %d frames of %d, or other bytes" % (dest + (len(pl), len(want))))
            ok = False
    print("%d frames to A as they came%s, to B from the cache%s: %s%s" % (
        len(frames), " (twice)" if twice else "", ", each under its own key" if keys else "",
        "ok" if ok else "FAILED",
        " (%d bad)" % bad if bad else ""))
    return ok


if __name__ == "__main__":
    args = sys.argv[1:]
    twice, fan2 = "--twice" in args, "--fan2" in args
    args = [a for a in args if a not in ("--twice", "--fan2")]
    if len(args) >= 3 and args[0] == "gen":
        gen(*args[1:4], twice=twice)
    elif len(args) >= 3 and args[0] == "check":
        sys.exit(0 if check(args[1], args[2], args[3:], twice=twice, fan2=fan2) else 1)
    else:
        sys.exit(__doc__)
