#!/bin/sh
# pruned-checkpoint-dir.sh BFPATCH SHIM (set-up in lib.sh):
# a checkpoint directory whose first steps were pruned: the publisher
# starts at the first one there, or with --resume at the latest; an empty
# one is a clear error
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/pruned" "$T/empty"
cp "$T/traj/step-0002.safetensors" "$T/traj/step-0003.safetensors" "$T/pruned/"
"$BFP" publish $AUTH --dir "$T/pruned" --listen 127.0.0.1:$port --steps 2 --linger 0 \
	> "$T/publish18.log" 2>&1 || fail "publish from a pruned directory: $(cat "$T/publish18.log")"
grep -q "version 2 from $T/pruned" "$T/publish18.log" || fail "did not start at the first step there"
"$BFP" publish $AUTH --dir "$T/pruned" --resume --listen 127.0.0.1:$port --steps 3 --linger 0 \
	> "$T/publish19.log" 2>&1 || fail "publish --resume from a pruned directory"
grep -q "version 3 from $T/pruned" "$T/publish19.log" || fail "--resume did not start at the latest step"
"$BFP" publish $AUTH --dir "$T/empty" --listen 127.0.0.1:$port > "$T/publish20.log" 2>&1 &&
	fail "publish from an empty directory succeeded"
grep -q "no checkpoint" "$T/publish20.log" || fail "no clear error for an empty directory"
echo "ok - pruned checkpoint directories: the first step there, --resume at the latest, an empty one refused"
