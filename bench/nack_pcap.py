#!/usr/bin/env python3
"""nack_pcap.py PATCH OUT.pcap: packets for the relay's repair benchmark:
the patch's frames (so the relay caches them), a JOIN from 198.18.2.1, then
NACKs from that subscriber for runs of 8 cached frames (docs/PROTOCOL.md;
with the KEY flag, in bytes 6-7, when the frames are a keyframe stream)."""
import struct
import sys

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tests/relay")
from pcaptool import csum, write_pcap  # noqa: E402
from tap_peers import ctl, frames  # noqa: E402

RELAY = bytes([198, 18, 0, 1])
SUB = bytes([198, 18, 2, 1])


def udp(src, sport, dport, payload):
    ulen = 8 + len(payload)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + ulen, 0, 0x4000, 64, 17, 0,
                               src, RELAY))
    ip[10:12] = struct.pack("!H", 0xFFFF - csum(bytes(ip)))
    u = bytearray(struct.pack("!HHHH", sport, dport, ulen, 0) + payload)
    ck = 0xFFFF - csum(src + RELAY + b"\0\x11" + struct.pack("!H", ulen) + bytes(u))
    u[6:8] = struct.pack("!H", ck or 0xFFFF)
    eth = b"\x02\0\0\0\0\x01" + b"\x02\0\0\0\x02\x01" + b"\x08\x00"
    return eth + bytes(ip) + bytes(u)


def main():
    fr = frames(sys.argv[1])
    model = struct.unpack_from("<Q", fr[0], 8)[0]
    target = struct.unpack_from("<I", fr[0], 20)[0]
    # the NACK KEY flag for a keyframe stream's frames: a keyframe
    # encoding (not 1, 2, 5, 6: FORMAT.md) without the IN_PATCH flag
    key = 1 if fr[0][5] not in (1, 2, 5, 6) and not fr[0][6] & 1 else 0
    pkts = [udp(bytes([198, 18, 0, 100]), 7399, 7400, f) for f in fr]
    pkts.append(udp(SUB, 7501, 7401, ctl(1, model, 0, data_port=7500)))
    for k in range(0, len(fr) - 8, 8):
        pkts.append(udp(SUB, 7501, 7401, ctl(3, model, target, data_port=key, ranges=[(k, 8)])))
    write_pcap(sys.argv[2], pkts)


if __name__ == "__main__":
    main()
