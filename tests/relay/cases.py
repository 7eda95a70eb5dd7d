#!/usr/bin/env python3
"""cases.py: input pcaps and output checks for relay_cases_test.sh.

  gen CASE FRAMES.pcap IN.pcap    write IN.pcap for CASE from the frames of
                                  a real patch (FRAMES.pcap, `bfpatch pcap`)
  check CASE OUT.pcap             check what the relay sent in CASE
Packets are built from the Ethernet, ARP, IPv4 and UDP specifications
(pcaptool.py reads and writes the files); control messages as in
PROTOCOL.md (tap_peers.ctl).
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from kat_check import crc32c  # noqa: E402
from pcaptool import csum, read_pcap, udp_parts, write_pcap  # noqa: E402
from tap_peers import ctl  # noqa: E402

RELAY = "198.18.0.1"
RELAY_MAC = bytes.fromhex("020000000001")


def ip4(s):
    return bytes(int(x) for x in s.split("."))


def udp(src, sport, dst, dport, payload, smac):
    ulen = 8 + len(payload)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ulen, 1, 0, 64, 17, 0,
                               ip4(src), ip4(dst)))
    ip[10:12] = struct.pack("!H", 0xFFFF - csum(bytes(ip)))
    u = bytearray(struct.pack("!HHHH", sport, dport, ulen, 0) + payload)
    c = 0xFFFF - csum(ip4(src) + ip4(dst) + b"\0\x11" + struct.pack("!H", ulen) + bytes(u))
    u[6:8] = struct.pack("!H", c or 0xFFFF)
    return RELAY_MAC + smac + b"\x08\x00" + bytes(ip) + bytes(u)


def mac(last):
    return bytes.fromhex("0200000000%02x" % last)


def sub(msg, ip="198.18.0.11", smac=mac(0x11)):
    """a control message from a subscriber's control port 7501"""
    return udp(ip, 7501, RELAY, 7401, msg, smac)


GW_MAC = bytes.fromhex("0200000000fe")


def arp_reply(ip, smac):
    """an ARP reply (RFC 826) telling the relay ip is at smac"""
    a = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 2, smac, ip4(ip), RELAY_MAC, ip4(RELAY))
    return RELAY_MAC + smac + b"\x08\x06" + a + bytes(18)


def data(frame):
    return udp("198.18.0.10", 7399, RELAY, 7400, frame, mac(0x10))


def reseal(f, **fields):
    offs = {"target": 20, "index": 24, "count": 28}
    f = bytearray(f)
    for k, v in fields.items():
        if k == "hash_xor":  # other content: another target hash
            struct.pack_into("<Q", f, 48, struct.unpack_from("<Q", f, 48)[0] ^ v)
            continue
        struct.pack_into("<I", f, offs[k], v)
    struct.pack_into("<I", f, 56, crc32c(bytes(f[60:]), crc32c(bytes(f[:56]))))
    return bytes(f)


def gen(case, frames_pcap, out):
    fr = [udp_parts(p)[4] for p in read_pcap(frames_pcap)]
    model = struct.unpack_from("<Q", fr[0], 8)[0]
    target = struct.unpack_from("<I", fr[0], 20)[0]
    n = len(fr)
    p = []
    if case == "reserved":
        # a frame naming version 0xFFFFFFFF, then the real patch and a NACK
        # for its last 10 frames, which the cache must answer
        p = [sub(ctl(1, model, 0, data_port=7500)), data(reseal(fr[0], target=0xFFFFFFFF))]
        p += [data(f) for f in fr] + [sub(ctl(3, model, target, ranges=[(n - 10, 10)]))]
    elif case == "nack-ranges":
        # every other frame only: a NACK of all of them misses in n/2
        # ranges, more than one NACK upstream holds (128); asked again at
        # once, the frames left out must be asked, not suppressed
        assert n // 2 > 140, n
        p = [data(f) for f in fr[::2]] + [sub(ctl(1, model, 0, data_port=7500))]
        p += [sub(ctl(3, model, target, ranges=[(0, n)]))] * 2
    elif case == "new-mac":
        # an actor restarted on another NIC: same address, JOINs from a new MAC
        p = [sub(ctl(1, model, 0, data_port=7500), ip="198.18.0.12", smac=mac(0x12))]
        p += [sub(ctl(1, model, 0, data_port=7500), ip="198.18.0.12", smac=mac(0x77))]
        p += [data(f) for f in fr[:10]]
    elif case == "moved":
        # JOINs from one control port with data port 7500, then 7600: one
        # subscription, at 7600; then LEAVE: none
        p = [sub(ctl(1, model, 0, data_port=7500)), sub(ctl(1, model, 0, data_port=7600))]
        p += [data(f) for f in fr[:10]] + [sub(ctl(2, model, 0))] + [data(f) for f in fr[10:20]]
    elif case == "upstream-join":
        # a JOIN from the upstream's own address (forged: frames to it
        # would come back round), then frames
        p = [sub(ctl(1, model, 0, data_port=7400), ip="198.18.0.2", smac=mac(0x02))]
        p += [data(f) for f in fr[:10]]
    elif case == "join-flood":
        # one host JOINs 20 subscriptions (control ports 7600.., data ports
        # 8600..), then another host one, then frames
        p = [udp("198.18.0.11", 7600 + i, RELAY, 7401, ctl(1, model, 0, data_port=8600 + i),
                 mac(0x11)) for i in range(20)]
        p += [sub(ctl(1, model, 0, data_port=7500), ip="198.18.0.12", smac=mac(0x12))]
        p += [data(f) for f in fr[:5]]
    elif case == "recount":
        # a cached frame again with only its frame count changed (a
        # streamed copy, count 0, after the NACK answer): the same content
        p = [sub(ctl(1, model, 0, data_port=7500))] + [data(f) for f in fr[:100]]
        p += [data(reseal(fr[5], count=0))]
        p += [sub(ctl(3, model, target, ranges=[(0, 20)]))]
    elif case == "static-join":
        # JOINs from a static subscriber's address for 20 more data ports
        p = [udp("198.18.0.11", 7501, RELAY, 7401, ctl(1, model, 0, data_port=d), mac(0x11))
             for d in [7500] + list(range(8600, 8620))]
        p += [data(f) for f in fr[:5]]
    elif case == "remade":
        # version N cached, then its publisher makes version N again with
        # other content (frames 0-9 of the new run), then a NACK of 0-19:
        # 0-9 must be answered with the new run's frames, 10-19 not with
        # the old run's
        p = [sub(ctl(1, model, 0, data_port=7500))] + [data(f) for f in fr[:100]]
        p += [data(reseal(f, hash_xor=0x5A5A)) for f in fr[:10]]
        p += [sub(ctl(3, model, target, ranges=[(0, 20)]))]
    elif case == "gateway":
        # the upstream and a static subscriber live behind a router: the
        # gateway answers its ARP; frames and JOINs must go to its MAC
        p = [arp_reply("198.18.0.254", GW_MAC)] + [data(f) for f in fr[:10]]
    elif case == "rearp":
        # a static subscriber whose MAC an ARP answered moves (a replaced
        # NIC, a router failover): a later answer is followed
        p = [arp_reply("198.18.0.11", mac(0x11))] + [data(f) for f in fr[:10]]
        p += [arp_reply("198.18.0.11", mac(0x55))] + [data(f) for f in fr[10:20]]
    elif case == "join-arp":
        # a subscriber off the subnet JOINs through another router (MAC
        # 0x33) than --gateway: the gateway's ARP answer must not take over
        # where its frames go
        p = [sub(ctl(1, model, 0, data_port=7500), ip="198.19.7.7", smac=mac(0x33))]
        p += [arp_reply("198.18.0.254", GW_MAC)] + [data(f) for f in fr[:10]]
    elif case in ("no-arp", "slow"):
        p = [data(f) for f in fr]
    else:
        sys.exit("unknown case " + case)
    write_pcap(out, p)


def check(case, out_pcap):
    pk = read_pcap(out_pcap)
    to = {}
    ctl_to = {}
    arp = 0
    asked = set()
    sent = []
    for x in pk:
        if x[12:14] == b"\x08\x06" and struct.unpack("!H", x[20:22])[0] == 1:
            asked.add(".".join(map(str, x[38:42])))
            if x[38:42] == ip4("198.18.0.11"):
                arp += 1
        u = udp_parts(x)
        if isinstance(u, tuple) and u[4][:4] == b"BFPT":
            to.setdefault((".".join(map(str, u[1])), u[3]), []).append(x[0:6])
            sent.append(u[4])
        elif isinstance(u, tuple):
            ctl_to.setdefault((".".join(map(str, u[1])), u[3]), []).append(x[0:6])
    if case == "new-mac":
        macs = {m for m in to.get(("198.18.0.12", 7500), [])}
        assert macs == {mac(0x77)}, "frames went to %s" % [m.hex() for m in macs]
    elif case == "moved":
        got = {k: len(v) for k, v in to.items()}
        assert got == {("198.18.0.11", 7600): 10}, "frames went to %s" % got
    elif case == "upstream-join":
        assert ("198.18.0.2", 7400) not in to, "frames were sent to the upstream"
    elif case == "static-join":
        got = {k: len(v) for k, v in to.items()}
        assert len(got) <= 3 and got.get(("198.18.0.11", 7500)) == 5, \
            "frames went to %s (the static one and at most 2 by JOIN)" % sorted(got.items())
    elif case == "join-flood":
        per = int(sys.argv[4])
        got = {k: len(v) for k, v in to.items()}
        want = {("198.18.0.11", 8600 + i): 5 for i in range(per)}
        want[("198.18.0.12", 7500)] = 5
        assert got == want, "frames went to %s" % sorted(got.items())
    elif case == "remade":
        fr = [udp_parts(q)[4] for q in read_pcap(sys.argv[4])]
        old = {struct.unpack_from("<I", f, 24)[0]: f[48:56] for f in fr[:20]}
        got = {}  # index -> [old-run copies, new-run copies]
        for f in sent:
            i = struct.unpack_from("<I", f, 24)[0]
            if i < 20:
                got.setdefault(i, [0, 0])[0 if f[48:56] == old[i] else 1] += 1
        want = {i: [1, 2] if i < 10 else [1, 0] for i in range(20)}
        assert got == want, "index: [old run, new run] frames sent %s" % got
    elif case == "gateway":
        assert asked <= {"198.18.0.254", RELAY}, "ARP requests for %s" % sorted(asked)
        assert "198.18.0.254" in asked, "the gateway was never ARPed"
        macs = to.get(("198.19.6.6", 7500), [])
        assert len(macs) == 10 and set(macs) == {GW_MAC}, \
            "frames to the subscriber behind the gateway: %s" % [m.hex() for m in macs]
        joins = ctl_to.get(("198.19.5.5", 7401), [])
        assert joins and set(joins) == {GW_MAC}, \
            "JOINs to the upstream behind the gateway: %s" % [m.hex() for m in joins]
    elif case == "rearp":
        macs = to.get(("198.18.0.11", 7500), [])
        assert macs == [mac(0x11)] * 10 + [mac(0x55)] * 10, \
            "frames to the static subscriber went to %s" % [m.hex() for m in macs]
        t = [s for s, x in read_pcap(out_pcap, stamps=True) if x[12:14] == b"\x08\x06" and
             struct.unpack("!H", x[20:22])[0] == 1 and x[38:42] == ip4("198.18.0.11")]
        # the first when it was configured, the next one 10 housekeeping
        # rounds later (about 9 s; unanswered ones are asked every second)
        assert len(t) >= 2 and t[-1] - t[0] >= 5, \
            "the static subscriber was not ARPed again (at %s s)" % [round(s - t[0], 1) for s in t]
    elif case == "join-arp":
        macs = to.get(("198.19.7.7", 7500), [])
        assert macs == [mac(0x33)] * 10, \
            "frames to the subscriber that JOINed went to %s" % [m.hex() for m in macs]
    elif case == "no-arp":
        assert arp >= 2, "%d ARP requests for a static subscriber without a MAC" % arp
    elif case == "slow":
        got = len(to.get(("198.18.0.11", 7500), []))
        want = int(sys.argv[4])
        assert got == want, "the unpaced subscriber got %d of %d frames" % (got, want)
    print("ok - %s" % case)


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
