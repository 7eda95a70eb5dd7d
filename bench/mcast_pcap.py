#!/usr/bin/env python3
"""mcast_pcap.py IN OUT GROUP: IN's IPv4 packets readdressed to the
multicast group GROUP (224.0.0.x; Ethernet 01:00:5e:...), IPv4 checksum
made right again, into OUT: the input of DPDK's ipv4_multicast example in
bench_relay.sh, the same packets the relay gets but for their destination.
The UDP checksum is left as it was (the example does not look at it)."""
import socket
import struct
import sys


def main(src, dst, group):
    d = open(src, "rb").read()
    g = socket.inet_aton(group)
    mac = bytes([0x01, 0x00, 0x5E, g[1] & 0x7F, g[2], g[3]])
    out, at = [d[:24]], 24
    while at + 16 <= len(d):
        incl = struct.unpack_from("<I", d, at + 8)[0]
        p = bytearray(d[at + 16:at + 16 + incl])
        if len(p) >= 34 and p[12:14] == b"\x08\x00":
            p[0:6] = mac
            p[30:34] = g
            p[24:26] = b"\0\0"
            s = sum(struct.unpack("!10H", bytes(p[14:34])))
            while s >> 16:
                s = (s & 0xFFFF) + (s >> 16)
            p[24:26] = struct.pack("!H", ~s & 0xFFFF)
        out.append(d[at:at + 16])
        out.append(bytes(p))
        at += 16 + incl
    open(dst, "wb").write(b"".join(out))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
