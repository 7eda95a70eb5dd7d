#!/usr/bin/env python3
"""pcaptool.py: an independent pcap reader/writer for the relay tests.

  mix IN OUT          copy IN's packets to OUT with malformed packets mixed
                      in; prints the number of malformed packets added
  tamper IN OUT       copy IN's packets (signed frames) to OUT, each of the
                      first 8 followed by a copy with one byte of its frame
                      (CRC32C made right again) or trailer flipped (valid
                      headers); prints 8
  check IN OUT N      OUT must carry every bfpatch frame of IN exactly once
                      to each of N subscribers, byte-identical, with valid
                      IPv4 and UDP checksums; prints a summary
  check-perhop IN OUT IP:PORT=KEYFILE,...
                      the same, each frame's trailer signed again under
                      its subscriber's own key (docs/SECURITY.md) and under
                      no other subscriber's
Written from the pcap, IPv4 and UDP specifications; shares no code with
the relay.
"""
import os
import socket
import struct
import sys


def read_pcap(path, stamps=False):
    """the packets of path; with stamps, (seconds, packet) pairs"""
    d = open(path, "rb").read()
    magic = struct.unpack_from("<I", d)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):  # micro- or nanosecond pcap
        sys.exit("%s: not a little-endian pcap file" % path)
    frac = 1e-6 if magic == 0xA1B2C3D4 else 1e-9
    at, out = 24, []
    while at + 16 <= len(d):
        sec, sub, incl, _ = struct.unpack_from("<IIII", d, at)
        p = d[at + 16:at + 16 + incl]
        out.append((sec + sub * frac, p) if stamps else p)
        at += 16 + incl
    return out


def write_pcap(path, pkts):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, p in enumerate(pkts):
            f.write(struct.pack("<IIII", i // 1000000, i % 1000000, len(p), len(p)))
            f.write(p)


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def udp_parts(p):
    """(src_ip, dst_ip, sport, dport, payload) if p is a valid IPv4/UDP
    packet with correct checksums, else None."""
    if len(p) < 42 or p[12:14] != b"\x08\x00":
        return None
    ip = p[14:34]
    if ip[0] != 0x45 or csum(ip) != 0xFFFF:
        return "bad-ip"
    tot = struct.unpack("!H", ip[2:4])[0]
    if ip[9] != 17 or tot > len(p) - 14:
        return None
    udp = p[34:14 + tot]
    ulen = struct.unpack("!H", udp[4:6])[0]
    if ulen != len(udp):
        return "bad-udp"
    pseudo = ip[12:20] + b"\0\x11" + struct.pack("!H", ulen)
    if struct.unpack("!H", udp[6:8])[0] != 0 and csum(pseudo + udp) != 0xFFFF:
        return "bad-udp"
    return (ip[12:16], ip[16:20], struct.unpack("!H", udp[0:2])[0],
            struct.unpack("!H", udp[2:4])[0], bytes(udp[8:]))


def mix(src, dst):
    good = read_pcap(src)
    base = good[0]
    bad = []
    bad.append(base[:30])                                  # truncated
    b = bytearray(base); b[12:14] = b"\x86\xdd"; bad.append(bytes(b))  # IPv6 type
    b = bytearray(base); b[22] ^= 1; bad.append(bytes(b))  # IP checksum wrong
    b = bytearray(base); b[-1] ^= 1; bad.append(bytes(b))  # UDP checksum wrong
    # a valid UDP packet whose payload is not a bfpatch frame
    b = bytearray(base)
    b[42] ^= 0xFF
    b[40:42] = b"\0\0"  # checksum 0: "not computed", still a bad frame
    bad.append(bytes(b))
    b = bytearray(base); b[36:38] = struct.pack("!H", 9999); b[40:42] = b"\0\0"
    bad.append(bytes(b))                                   # unknown port
    b = bytearray(base); b[30:34] = bytes([198, 18, 9, 9])
    ip = bytearray(b[14:34]); ip[10:12] = b"\0\0"
    ip[10:12] = struct.pack("!H", 0xFFFF - csum(bytes(ip)) & 0xFFFF)
    b[14:34] = ip; b[40:42] = b"\0\0"
    bad.append(bytes(b))                                   # not our address
    # a frame in an encoding this relay does not know (a newer publisher):
    # byte 5 of the frame; UDP checksum 0 ("not computed")
    b = bytearray(base); b[42 + 5] = 0x7F; b[40:42] = b"\0\0"
    bad.append(bytes(b))
    out = []
    for i, p in enumerate(good):
        out.append(p)
        if i < len(bad):
            out.append(bad[i])
    write_pcap(dst, out)
    print(len(bad))


def crc32c(b):
    """CRC-32C (Castagnoli), bit by bit"""
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF


def tamper(src, dst):
    out = []
    pkts = read_pcap(src)
    for i, p in enumerate(pkts):
        out.append(p)
        if i < 8:
            b = bytearray(p)
            # frame header, payload, the 40-byte trailer's key id, run,
            # time and tag (PROTOCOL.md 4)
            at = [42 + 9, 42 + 70, len(b) - 36, len(b) - 28, len(b) - 20, len(b) - 1,
                  42 + 20, 42 + 48][i]
            b[at] ^= 0x10
            if at < len(b) - 40:  # a forger's frame: its CRC made right again
                f = b[42:len(b) - 40]
                f[56:60] = struct.pack("<I", crc32c(bytes(f[:56]) + bytes(f[60:])))
                b[42:len(b) - 40] = f
            b[40:42] = b"\0\0"  # UDP checksum "not computed"
            out.append(bytes(b))
    write_pcap(dst, out)
    print(min(8, len(pkts)))


def outputs(path):
    """(packet, its udp_parts, or None if its headers or checksums are
    bad) for each non-ARP packet of a relay's output pcap"""
    for p in read_pcap(path):
        if p[12:14] != b"\x08\x06":  # ARP
            u = udp_parts(p)
            yield p, u if isinstance(u, tuple) else None


def check(src, dst, nsubs):
    frames = [udp_parts(p)[4] for p in read_pcap(src)]
    got = {}
    bad = 0
    for _, u in outputs(dst):
        if not u:
            bad += 1
            continue
        got.setdefault((u[1], u[3]), []).append(u[4])
    ok = True
    if bad:
        print("FAIL: %d packets with bad headers or checksums" % bad)
        ok = False
    if len(got) != nsubs:
        print("FAIL: %d destinations, expected %d" % (len(got), nsubs))
        ok = False
    want = sorted(frames)
    for dest, pl in got.items():
        if sorted(pl) != want:
            print("FAIL: %s got %d frames, %d expected, or different bytes"
                  % (dest, len(pl), len(want)))
            ok = False
    print("%d frames x %d subscribers checked: %s" % (len(frames), len(got),
                                                      "ok" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


def check_perhop(src, dst, keymap):
    """Every output to each subscriber: a source frame with its trailer
    signed again under that subscriber's key (keymap "IP:PORT=KEYFILE,..."),
    bound to the source's run; valid checksums; each frame exactly once."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import authtool
    keys = {}
    for item in keymap.split(","):
        dest, kf = item.split("=")
        ip, port = dest.split(":")
        keys[(ip, int(port))] = authtool.read_key(kf)
    frames, runs = [], set()
    for p in read_pcap(src):
        d = udp_parts(p)[4]
        frames.append(d[:-authtool.LEN])
        runs.add(struct.unpack_from("<Q", d, len(d) - authtool.LEN + 8)[0])
    got, bad = {}, 0
    for p, u in outputs(dst):
        if not u:
            bad += 1
            continue
        dest = (socket.inet_ntoa(u[1]), u[3])
        if p[40:42] == b"\0\0":  # a relay always computes the UDP checksum
            bad += 1
        kid, key = keys[dest]
        o = authtool.open_(kid, key, u[4])
        for other, (k2, key2) in keys.items():  # no other subscriber's key takes it
            if other != dest and authtool.open_(k2, key2, u[4]) is not None:
                bad += 1
        if o is None or o[1] not in runs or o[2] != 0:
            bad += 1
            continue
        got.setdefault(dest, []).append(o[0])
    ok = not bad and len(got) == len(keys) and all(sorted(v) == sorted(frames) for v in got.values())
    print("%d frames x %d subscribers, each under its own key: %s%s" % (
        len(frames), len(got), "ok" if ok else "FAILED", " (%d bad)" % bad if bad else ""))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    if sys.argv[1] == "mix":
        mix(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "tamper":
        tamper(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "check-perhop":
        check_perhop(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)
