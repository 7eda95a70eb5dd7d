#!/usr/bin/env python3
"""write_in_place.py SRC DST SECONDS [READY]: write the safetensors file SRC
to DST as a trainer that preallocates its checkpoint does: the header and
the file's full size (zeros) first, then, SECONDS later and with the file
still open, the tensor data. READY, if given, is created once the zeros
are written."""
import struct
import sys
import time

src = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<Q", src)[0]
with open(sys.argv[2], "wb") as f:
    f.write(src[:8 + n])
    f.write(bytes(len(src) - 8 - n))  # preallocated: the right size, zeros
    f.flush()
    if len(sys.argv) > 4:
        open(sys.argv[4], "w").close()
    time.sleep(float(sys.argv[3]))
    f.seek(8 + n)
    f.write(src[8 + n:])
