#!/bin/sh
# odd-sequence-repaired.sh BFPATCH SHIM (set-up in lib.sh):
# a crash inside wbuf_end, after the version was published and before
# the sequence counter went even (READY with an odd count): readers would
# wait for ever; the restarted shim makes it even
set -u
. "$(dirname "$0")/lib.sh"
traj5
make_buffer sq "$T/traj5/step-0004.safetensors" 4 - # READY, at version 4

python3 -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(80); n = struct.unpack('<Q', f.read(8))[0]
    f.seek(80); f.write(struct.pack('<Q', n | 1))" "$SHM.sq"
"$SHIM" $AUTH --buffer "$SHM.sq" --upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 26)) \
	--exit-after 0.5 > "$T/shimsq.log" 2>&1 || fail "shim on a buffer with an odd sequence count"
python3 -c "
import struct, sys
b = open(sys.argv[1], 'rb').read(88)
st, seq = struct.unpack_from('<I', b, 68)[0], struct.unpack_from('<Q', b, 80)[0]
sys.exit(0 if st == 0 and seq % 2 == 0 else 1)" "$SHM.sq" ||
	fail "the sequence count of a published version stayed odd"
grep -q "died before it told readers" "$T/shimsq.log" || fail "the repair was not logged"
echo "ok - an odd sequence count repaired"
