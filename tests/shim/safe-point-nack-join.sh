#!/bin/sh
# safe-point-nack-join.sh BFPATCH SHIM (set-up in lib.sh):
# safe-point commits: while version 1 is complete and waits for the actor,
# a frame lost from the patch 1 -> 2 is NACKed at once, not only once the
# actor allows version 1 (by then caches may have let it go); and the shim
# JOINs with version 1 (it holds it), so a publisher does not send the
# patch again every 3 s as a catch-up
set -u
AUTH=--insecure # it plays the publisher with unsigned frames of its own
. "$(dirname "$0")/lib.sh"
traj5
traj5_patches 0 1

python3 - "$T" "$HERE" "$SHIM" "$SHM.nl" $((port + 27)) $((port + 28)) <<'PY' || fail "NACKs and JOINs while waiting at a safe point"
import os, socket, struct, subprocess, sys, time
T, here, shim, buf, up, me = sys.argv[1:7]
sys.path.insert(0, here + "/relay")
from tap_peers import frames
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", int(up)))
log = open(T + "/shimnl.log", "w")
p = subprocess.Popen([shim, "--insecure", "--buffer", buf, "--init", T + "/traj5/step-0000.safetensors",
                      "--commit", "safe-point", "--upstream", "127.0.0.1:" + up,
                      "--listen", "127.0.0.1:" + me, "--nack-ms", "50", "--exit-after", "20"],
                     stdout=log, stderr=subprocess.STDOUT)
try:
    u.settimeout(10)
    u.recvfrom(2048)  # its first JOIN: it listens
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    f1 = frames(T + "/q1")
    for f in frames(T + "/q0") + f1[:10] + f1[11:]:
        s.sendto(f, ("127.0.0.1", int(me)))
        time.sleep(0.0002)
    u.settimeout(0.2)
    sent = time.monotonic()
    end, nacked, vs = sent + 4, False, []
    while time.monotonic() < end and not (nacked and len(vs) >= 2):
        try:
            d = u.recv(2048)
        except socket.timeout:
            continue
        v = struct.unpack_from("<I", d, 16)[0]
        nacked |= d[5] == 3 and v == 2
        if d[5] == 1 and time.monotonic() - sent > 0.5:  # JOINs once it staged
            vs.append(v)
    assert nacked, "no NACK of version 2 while version 1 waited for the actor"
    assert vs and all(v == 1 for v in vs), "JOIN versions %s, not 1 (staged)" % vs
finally:
    p.terminate()
    p.wait()
PY
grep -q "version 1 staged" "$T/shimnl.log" || fail "version 1 was not staged: $(cat "$T/shimnl.log")"
echo "ok - NACKs while a version waits at a safe point, JOINs with the staged version"
