#!/bin/sh
# new-metadata.sh BFPATCH SHIM (set-up in lib.sh):
# a checkpoint whose safetensors header differs only in __metadata__ (a
# trainer that records its step there): published, with a warning
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/meta"
cp "$T/traj/step-0000.safetensors" "$T/meta/"
python3 - "$T/traj/step-0001.safetensors" "$T/meta/step-0001.safetensors" <<'PY' ||
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<Q", b)[0]
hdr = json.loads(b[8:8 + n])
hdr["__metadata__"] = {"step": "1", "note": "metadata only"}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
PY
	fail "writing a checkpoint with new metadata"
start_shim md --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 19)) --exit-after 30
"$BFP" publish $AUTH --dir "$T/meta" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 > "$T/publish21.log" 2>&1 || fail "publish a step with new metadata: $(tail -n 2 "$T/publish21.log")"
wait_line "committed version 0 -> 1" "$T/shimmd.log" || fail "the step with new metadata was not committed"
kill -TERM $PIDS; wait; PIDS=""
grep -q "differs from version 0's beyond the tensor layout" "$T/publish21.log" ||
	fail "no warning about the new metadata"
check_buffers "$T/traj/step-0001.safetensors" "$SHM.md" || fail "step with new metadata"
echo "ok - a step with new __metadata__ published with a warning"
