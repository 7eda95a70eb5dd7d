#!/bin/sh
# nack-during-stream.sh BFPATCH SHIM (set-up in lib.sh):
# a NACK that comes while its version is still being sent (paced at
# 20 kB/s here) is answered from the frames already sent, not dropped
set -u
AUTH=--insecure # it sends unsigned datagrams of its own (Python): the keyless path
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/midst"
cp "$T/traj/step-0000.safetensors" "$T/midst/"
"$BFP" publish $AUTH --dir "$T/midst" --listen 127.0.0.1:$port --rate 160k --linger 2 \
	> "$T/publish36.log" 2>&1 &
PUB=$!
python3 - $port "$HERE" "$T/traj/step-0001.safetensors" "$T/midst" <<'PY' || fail "a NACK during the stream"
import os, shutil, socket, struct, sys, time
sys.path.insert(0, sys.argv[2] + "/relay")
from tap_peers import ctl, join, receiver
port = int(sys.argv[1])
s = receiver(8 << 20)
join(s, port, 0)
time.sleep(0.5)
shutil.copy(sys.argv[3], sys.argv[4] + "/.t")
os.rename(sys.argv[4] + "/.t", sys.argv[4] + "/step-0001.safetensors")
seen, again, nacked, last = set(), 0, False, time.monotonic() + 30
while time.monotonic() < last:
    try:
        d = s.recv(65536)
    except socket.timeout:
        continue
    if d[:4] != b"BFPT" or struct.unpack_from("<I", d, 20)[0] != 1:
        continue
    i = struct.unpack_from("<I", d, 24)[0]
    if i in seen:
        again += i < 10
    seen.add(i)
    if len(seen) == 12 and not nacked:
        s.sendto(ctl(3, 0, 1, ranges=[(0, 10)]), ("127.0.0.1", port))
        nacked = True
    if again >= 10:
        break
assert nacked, "the stream was too short to NACK during it (%d frames)" % len(seen)
assert again >= 10, "%d of the 10 frames NACKed during the stream came again" % again
PY
kill $PUB 2>/dev/null; wait $PUB 2>/dev/null
echo "ok - a NACK answered while its version streams"
