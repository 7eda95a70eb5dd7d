#!/usr/bin/env python3
"""make_corpus.py: seed corpora for the fuzz harnesses, from the KAT vectors,
a synthetic safetensors header, and control messages that a shim and a
publisher of the same build send. Run from the repository root:
    python3 tests/fuzz/make_corpus.py build/cli/bfpatch
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

root = "tests/fuzz/corpus"
for d in ("frame", "safetensors", "patch", "control", "auth"):
    os.makedirs(f"{root}/{d}", exist_ok=True)

kat = "tests/kat"
for f in sorted(os.listdir(kat)):
    if not f.endswith(".patch"):
        continue
    data = open(f"{kat}/{f}", "rb").read()
    name = f[:-6]
    open(f"{root}/patch/{name}", "wb").write(data)
    at, i = 0, 0
    while at < len(data):
        pl = struct.unpack_from("<I", data, at + 44)[0]
        frame = data[at:at + 60 + pl]
        # byte 0: mode (1 = recompute CRC, 2 = 100001-parameter weights)
        open(f"{root}/frame/{name}-{i}", "wb").write(b"\x03" + frame)
        open(f"{root}/frame/{name}-{i}-scalar", "wb").write(b"\x83" + frame)
        if frame[5] == 5:  # a frame that carries a model: kept for the ones after it
            model = frame
        elif frame[5] == 6 and i < 4:  # (bit 6: the model's frame first)
            open(f"{root}/frame/{name}-{i}-model", "wb").write(b"\x43" + model + frame)
        at += 60 + pl
        i += 1

def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF


# a patch file ending with a header record (FORMAT.md 4.1): the KAT's rl
# patch and a new safetensors header for its file 0 of 1
rl = open(f"{kat}/rl.patch", "rb").read()
hdr = b'{"__metadata__":{"step":"2"}}   '
rec = (struct.pack("<IBBH", 0x48504642, 1, 1, 0) + rl[8:16] + rl[20:24]
       + struct.pack("<IIIQ", 0, 1, 0, len(hdr)) + hdr)
open(f"{root}/patch/header-record", "wb").write(rl + rec + struct.pack("<I", crc32c(rec)))

with tempfile.TemporaryDirectory() as t:
    subprocess.run([sys.argv[1], "synth", "-o", t, "-p", "20k", "-n", "0"],
                   check=True, stderr=subprocess.DEVNULL)
    data = open(f"{t}/step-0000.safetensors", "rb").read()
    n = struct.unpack_from("<Q", data)[0]
    open(f"{root}/safetensors/synth-header", "wb").write(data[:8 + n + 64])
small = b'{"__metadata__":{"a":"b"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
open(f"{root}/safetensors/small", "wb").write(struct.pack("<Q", len(small)) + small + bytes(8))


# ---- control messages (docs/PROTOCOL.md section 2) ----

def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF


def ctl(typ, w6, model, version, rate, ranges=()):
    m = struct.pack("<IBBHQIII", 0x43504642, 1, typ, w6, model, version, rate,
                    len(ranges))
    m += b"".join(struct.pack("<II", f, n) for f, n in ranges)
    return m + struct.pack("<I", crc32c(m))


def seed(name, msg):
    # byte 0 of fuzz_control's input: 0 = the datagram as it is
    open(f"{root}/control/{name}", "wb").write(b"\x00" + msg)


def capture(bfpatch):
    """A shim's JOIN and its NACK of a version it heard of, a publisher's
    HEARTBEAT: what the programs send, read from a UDP socket."""
    build = os.path.dirname(os.path.dirname(os.path.abspath(bfpatch)))
    shim = f"{build}/host_shim/bfpatch-shim"

    def keyless(*cmd):  # unsigned messages: no trailer (not fuzzed here)
        h = subprocess.run([*cmd, "--help"], capture_output=True, text=True).stdout
        return ["--insecure"] if "--insecure" in h else []

    got = {}
    with tempfile.TemporaryDirectory() as t:
        subprocess.run([bfpatch, "synth", "-o", t, "-p", "20k", "-n", "1"],
                       check=True, stderr=subprocess.DEVNULL)
        up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        up.bind(("127.0.0.1", 0))
        up.settimeout(5)
        data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        data.bind(("127.0.0.1", 0))
        dport = data.getsockname()[1]
        data.close()
        p = subprocess.Popen([shim, *keyless(shim), "--buffer", f"{t}/buf", "--init",
                              f"{t}/step-0000.safetensors", "--upstream",
                              f"127.0.0.1:{up.getsockname()[1]}", "--listen",
                              f"127.0.0.1:{dport}"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            m, a = up.recvfrom(9000)
            got["shim-join"] = m
            model = struct.unpack_from("<Q", m, 8)[0]
            got["model"] = model
            up.sendto(ctl(4, 0, model, 1, 0), a)  # a HEARTBEAT naming version 1
            while "shim-nack" not in got:
                m, _ = up.recvfrom(9000)
                if m[5] == 3:
                    got["shim-nack"] = m
        finally:
            p.terminate()
            p.wait()
        ctlp = up.getsockname()[1]
        up.close()  # its port: the publisher's control port
        p = subprocess.Popen([bfpatch, "publish", *keyless(bfpatch, "publish"), "--dir", t,
                              "--listen", f"127.0.0.1:{ctlp}", "--steps", "3"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            sub = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sub.bind(("127.0.0.1", 0))
            sub.settimeout(5)
            # --steps past the two checkpoints: it waits for a third,
            # sending HEARTBEATs once a second
            deadline = time.time() + 10
            while "publisher-heartbeat" not in got and time.time() < deadline:
                sub.sendto(ctl(1, sub.getsockname()[1], 0, 0, 0), ("127.0.0.1", ctlp))
                try:
                    m, _ = sub.recvfrom(9000)
                except socket.timeout:
                    continue
                if m[:4] == b"BFPC" and m[5] == 4:
                    got["publisher-heartbeat"] = m
        finally:
            p.terminate()
            p.wait()
    return got


got = capture(sys.argv[1])
model = got.pop("model")
for name, msg in got.items():
    seed(name, msg)
# what the programs send in other states, built here from the table
seed("relay-join-every-model", ctl(1, 7400, 0, 0xFFFFFFFF, 0))
seed("join-none", ctl(1, 7500, model, 0xFFFFFFFE, 1000000))
seed("leave", ctl(2, 0, model, 0, 0))
seed("nack-key", ctl(3, 1, model, 7, 0, [(0, 4096)]))
seed("nack-tail", ctl(3, 0, model, 7, 0, [(0xFFFFFFFF, 1)]))
seed("nack-max", ctl(3, 0, model, 9, 0, [(i * 3, 2) for i in range(128)]))
# the same with the CRC left to the harness (byte 0 bit 0), and as fields
# (bit 1: type, data_port/flags, model_id, version, rate_kbps, count, ranges)
open(f"{root}/control/nack-fix-crc", "wb").write(
    b"\x01" + ctl(3, 0, model, 2, 0, [(5, 1), (9, 3)])[:-4] + bytes(4))
open(f"{root}/control/fields-join", "wb").write(
    b"\x02" + struct.pack("<BHQIIB", 1, 7500, model, 3, 0, 0).ljust(26, b"\0"))
# a range whose last frame is index 2^32 - 1: accepted (PROTOCOL.md 2)
open(f"{root}/control/fields-nack-last-index", "wb").write(
    b"\x02" + struct.pack("<BHQIIB", 3, 0, model, 3, 0, 2).ljust(26, b"\0")
    + struct.pack("<IIII", 0, 1, 0xFFFFFFF0, 16))
open(f"{root}/control/fields-nack", "wb").write(
    b"\x02" + struct.pack("<BHQIIB", 3, 1, model, 3, 0, 2).ljust(26, b"\0")
    + struct.pack("<IIII", 0, 10, 20, 5))
# auth (fuzz_auth.c): byte 0 the mode, 8 bytes of run/time/sender, 2 of a
# bit position, then a datagram or a message; signed with the harness's
# --key (id 1) and peer keys (7, 9) by tests/authtool.py
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import authtool  # noqa: E402
k1 = bytes(range(32))
first = open(f"{kat}/rl.patch", "rb").read()
first = first[:60 + struct.unpack_from("<I", first, 44)[0]]
now = int(time.time() * 1e6)
join = ctl(1, 7500, model, 3, 0)
nack = ctl(3, 0, model, 2, 0, [(5, 1), (9, 3)])
for name, head, body in (
        ("frame", b"\x00" + bytes(10), authtool.seal(1, k1, first, 0x1234)),
        ("frame-unknown-key", b"\x00" + bytes(10), authtool.seal(2, k1, first, 0x1234)),
        ("control-join", b"\x01" + struct.pack("<Q", now) + bytes(2),
         authtool.seal(1, k1, join, 0, now)),
        ("control-peer-nack", b"\x01" + struct.pack("<Q", now) + bytes(2),
         authtool.seal(7, bytes([7] * 32), nack, 5, now)),
        ("seal-frame", b"\x02" + struct.pack("<Q", 0x1234) + bytes(2), first),
        ("seal-frame-flip", b"\x06" + struct.pack("<Q", 0x1234) + b"\x10\x02", first),
        ("seal-peer-join", b"\x03" + struct.pack("<Q", 9) + bytes(2), join),
        ("seal-peer9-nack-flip", b"\x0f" + struct.pack("<Q", 9) + b"\x33\x00", nack)):
    open(f"{root}/auth/{name}", "wb").write(head + body)
print("corpus written under", root)
