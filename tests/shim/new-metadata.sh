#!/bin/sh
# new-metadata.sh BFPATCH SHIM (set-up in lib.sh):
# a checkpoint whose safetensors header differs only in __metadata__ (a
# trainer that records its step there): published without a warning (the
# actors map tensors; the header does not go over the network), and the
# patch the publisher keeps (--history) carries the new header
# (FORMAT.md 4.1): applied to step 0 it gives the new file byte for byte,
# and it carries the record `bfpatch diff` makes of the same pair
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/meta" "$T/hist"
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
"$BFP" publish $AUTH --dir "$T/meta" --history "$T/hist" --listen 127.0.0.1:$port \
	--wait-subscribers 1 --steps 1 --linger 1 > "$T/publish21.log" 2>&1 ||
	fail "publish a step with new metadata: $(tail -n 2 "$T/publish21.log")"
wait_line "committed version 0 -> 1" "$T/shimmd.log" || fail "the step with new metadata was not committed"
kill -TERM $PIDS; wait; PIDS=""
! grep -q "header differs" "$T/publish21.log" || fail "a warning about the new metadata"
check_buffers "$T/traj/step-0001.safetensors" "$SHM.md" || fail "step with new metadata"
kept=$T/hist/v00000000-v00000001.bfp
[ -f "$kept" ] || fail "no kept patch 0 -> 1"
"$BFP" info --json "$kept" > "$T/info.json" || fail "info of the kept patch"
python3 -c "
import json, sys
r = json.load(open('$T/info.json'))['header_records']
sys.exit(0 if len(r) == 1 and r[0]['kind'] == 'safetensors_header' and r[0]['files'] == 1 else 1)
" || fail "the kept patch carries no header record: $(cat "$T/info.json")"
"$BFP" apply -q "$T/meta/step-0000.safetensors" "$kept" -o "$T/applied.safetensors" ||
	fail "applying the kept patch"
cmp -s "$T/applied.safetensors" "$T/meta/step-0001.safetensors" ||
	fail "the kept patch does not reproduce the step with new metadata byte for byte"
"$BFP" diff -q "$T/meta/step-0000.safetensors" "$T/meta/step-0001.safetensors" -o "$T/d01" ||
	fail "diff of the step with new metadata"
# the frames differ in size (with --key a frame leaves room for its
# trailer); the records after them are the same bytes
python3 - "$T/d01" "$kept" <<'PY' || fail "diff and publish's kept patch carry other header records"
import struct, sys
def records(path):
    d = open(path, "rb").read()
    at = 0
    while d[at:at + 4] == b"BFPT":
        at += 60 + struct.unpack_from("<I", d, at + 44)[0]
    return d[at:]
a, b = records(sys.argv[1]), records(sys.argv[2])
sys.exit(0 if a[:4] == b"BFPH" and a == b else 1)
PY
echo "ok - a step with new __metadata__ published; its kept patch carries the header"
