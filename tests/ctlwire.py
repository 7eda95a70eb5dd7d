"""ctlwire.py: control messages (docs/PROTOCOL.md section 2) written from
the document, for test tools that speak the protocol themselves
(auth_inject.py, chaos_proxy.py), independently of dpdk_app/proto.c."""
import struct

JOIN, LEAVE, NACK, HEARTBEAT = 1, 2, 3, 4


def crc32c(b):
    """CRC32C (Castagnoli, reflected), bit by bit."""
    crc = 0xFFFFFFFF
    for x in b:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def seal(body):
    """body (a message without its CRC) followed by its CRC32C."""
    return body + struct.pack("<I", crc32c(body))


def message(typ, version, port_or_flags, ranges=()):
    """A control message: JOIN's data port or NACK's flags in bytes 6-7."""
    body = struct.pack("<IBBHQIII", 0x43504642, 1, typ, port_or_flags, 0, version, 0, len(ranges))
    for first, n in ranges:
        body += struct.pack("<II", first, n)
    return seal(body)
