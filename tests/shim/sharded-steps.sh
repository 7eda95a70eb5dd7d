#!/bin/sh
# sharded-steps.sh BFPATCH SHIM (set-up in lib.sh):
# a trainer that writes Hugging Face sharded checkpoints, DIR/step-NNNN/
# (an index and its shards, docs/FORMAT.md 1): a shim's --init from one
# holds what --init from the same weights in one file holds (the same
# model id and parameter bytes), publish --dir delivers every step to it
# bit-exactly, and the patches it keeps (--history) rebuild each step's
# shards and index byte for byte, new metadata in them included
set -u
. "$(dirname "$0")/lib.sh"
traj
mkdir "$T/pub" "$T/hist"
for s in 0 1 2; do
	python3 "$HERE/make_shards.py" "$T/traj/step-000$s.safetensors" "$T/pub/step-000$s" 3 ||
		fail "sharding step $s"
done
python3 "$HERE/make_shards.py" "$T/traj/step-0003.safetensors" "$T/pub/step-0003" 3 \
	--index-meta step=3 --shard-meta 0:step=3 || fail "sharding step 3"

make_buffer sharded "$T/pub/step-0000" 0 0
make_buffer single "$T/traj/step-0000.safetensors" 0 0
python3 - "$SHM.sharded" "$SHM.single" <<'PY' || fail "--init from shards and from one file differ"
import hashlib, struct, sys
def buf(p):
    b = open(p, "rb").read()
    off, n = struct.unpack_from("<QQ", b, 48)
    return struct.unpack_from("<QQ", b, 16), hashlib.sha256(b[off:off + n]).digest()
sys.exit(0 if buf(sys.argv[1]) == buf(sys.argv[2]) else 1)
PY

start_shim sharded --upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 21)) --exit-after 60
"$BFP" publish $AUTH --dir "$T/pub" --history "$T/hist" --listen 127.0.0.1:$port \
	--wait-subscribers 1 --steps 3 --linger 1 > "$T/publish.log" 2>&1 ||
	fail "publish sharded steps: $(tail -n 2 "$T/publish.log")"
wait_line "committed version 2 -> 3" "$T/shimsharded.log" || fail "step 3 was not committed"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj/step-0003.safetensors" "$SHM.sharded" || fail "the buffer is not step 3"

# the kept patches rebuild the steps' files, index and metadata included
cp -r "$T/pub/step-0000" "$T/at"
for s in 1 2 3; do
	"$BFP" apply -q -f "$T/at" "$T/hist/v0000000$((s - 1))-v0000000$s.bfp" -o "$T/at" ||
		fail "applying the kept patch to step $s"
	for f in "$T/pub/step-000$s"/*; do
		cmp -s "$f" "$T/at/$(basename "$f")" || fail "step $s: $(basename "$f") differs"
	done
done
# a step written as one file after sharded ones: the same parameter
# space, but its patch could not rebuild the files, so it is not published
# (and the publisher goes on)
cp "$T/traj/step-0003.safetensors" "$T/pub/step-0004.safetensors"
"$BFP" publish $AUTH --dir "$T/pub" --listen 127.0.0.1:$port --steps 4 \
	> "$T/publish4.log" 2>&1 &
PUB=$!
wait_line "split into other files); not published" "$T/publish4.log" ||
	fail "a one-file step after sharded ones was not refused"
kill -0 $PUB || fail "the publisher ended on a one-file step after sharded ones"
echo "ok - sharded steps: --init as from one file, published bit-exactly, kept patches exact"
