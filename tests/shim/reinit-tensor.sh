#!/bin/sh
# reinit-tensor.sh BFPATCH SHIM (set-up in lib.sh):
# a step that re-initialises part of a tensor (new random values, as for
# a reset head): the encoder codes those ranges as absolute values, frames
# of the patch marked IN_PATCH (FORMAT.md 2.1); the shim files them with
# the patch and commits it, without a keyframe resync
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/reinit"
cp "$T/traj/step-0000.safetensors" "$T/reinit/"
python3 - "$T/traj/step-0001.safetensors" "$T/reinit/step-0001.safetensors" <<'PY' ||
import json, random, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack_from("<Q", b)[0]
hdr = json.loads(b[8:8 + n])
name, t = max(((k, v) for k, v in hdr.items() if k != "__metadata__" and v["dtype"] == "BF16"),
              key=lambda kv: kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0])
lo, hi = t["data_offsets"]
at = 8 + n + lo + (hi - lo) // 3 // 2 * 2
rnd = random.Random(5)
for i in range(at, at + (hi - lo) // 3 // 2 * 2, 2):
    struct.pack_into("<H", b, i, rnd.getrandbits(16))
open(sys.argv[2], "wb").write(b)
print("re-initialised a third of", name)
PY
	fail "re-initialising a tensor"
"$BFP" diff -q "$T/reinit/step-0000.safetensors" "$T/reinit/step-0001.safetensors" -o "$T/preinit"
"$BFP" info --json "$T/preinit" | python3 -c "
import json, sys
f = json.load(sys.stdin)['frames_by_encoding']
sys.exit(0 if f['keyframe'] + f['keyframe_zstd'] > 0 and f['sparse'] > 0 else 1)" ||
	fail "the re-initialised step made no keyframe-coded frames in its patch"
start_shim k --init "$T/reinit/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 14)) --exit-after 30
"$BFP" publish $AUTH --dir "$T/reinit" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 1 \
	--linger 1 > "$T/publish10.log" 2>&1 || fail "publish the re-initialised step"
wait_line "committed version 0 -> 1" "$T/shimk.log" 200 || fail "the re-initialised step was not committed"
kill -TERM $PIDS; wait; PIDS=""
grep -q "committed version 0 -> 1: " "$T/shimk.log" ||
	fail "the patch with keyframe-coded frames was not committed as a patch"
check_buffers "$T/reinit/step-0001.safetensors" "$SHM.k" || fail "re-initialised step"
echo "ok - a patch with keyframe-coded frames (a re-initialised tensor) committed as a patch"
