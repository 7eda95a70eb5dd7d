"""authtool.py: the authentication trailer of docs/PROTOCOL.md section 4,
written from that document alone (hashlib and python3-cryptography), so
that tests check the C implementation against an independent one."""
import hashlib
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = 0x32414642  # "BFA2"
LEN = 40


def read_key(path):
    """(key id, 32-byte key) of a key file: "KEY_ID HEX64"."""
    kid, khex = open(path).read().split()
    return int(kid), bytes.fromhex(khex)


def tag(key, data):
    """The 16-byte tag of data (message and trailer bytes 0..23)."""
    d = hashlib.blake2b(b"bfpatch auth v2", digest_size=32, key=key).digest()
    g = AESGCM(d[:16]).encrypt(bytes(12), b"", data)  # no plaintext: the tag alone
    e = Cipher(algorithms.AES(d[16:]), modes.ECB()).encryptor()
    return e.update(g) + e.finalize()


def seal(kid, key, msg, run, time_us=0):
    """msg followed by its trailer: bound to run; time_us 0 for frames."""
    head = struct.pack("<IIQQ", MAGIC, kid, run, time_us)
    return msg + head + tag(key, msg + head)


def open_(kid, key, data):
    """(message, run, time_us) of a datagram that verifies, else None."""
    if len(data) < LEN:
        return None
    m, t = data[:-LEN], data[-LEN:]
    magic, k, run, time_us = struct.unpack("<IIQQ", t[:24])
    if magic != MAGIC or k != kid or tag(key, m + t[:24]) != t[24:]:
        return None
    return m, run, time_us
