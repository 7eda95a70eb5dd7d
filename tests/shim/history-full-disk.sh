#!/bin/sh
# history-full-disk.sh BFPATCH SHIM (set-up in lib.sh):
# the publisher's history on a full disk (a file size limit: EFBIG, as a
# full disk gives ENOSPC): each patch is reported as not kept, nothing
# partial is left, and publishing goes on; an unwritable one is refused
set -u
. "$(dirname "$0")/lib.sh"
traj

mkdir "$T/hist"
start_shim h --init "$T/traj/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 7)) --exit-after 40
sh -c "trap '' XFSZ; ulimit -f 8; exec '$BFP' publish $AUTH --dir '$T/traj' --listen 127.0.0.1:$port \
	--wait-subscribers 1 --steps 3 --linger 2 --history '$T/hist'" > "$T/publish4.log" 2>&1 ||
	fail "publish with a full history disk"
wait_line "committed version 2 -> 3" "$T/shimh.log"
kill -TERM $PIDS; wait; PIDS=""
[ "$(grep -c 'history not kept' "$T/publish4.log")" = 3 ] || fail "history errors not reported"
grep -q "3 history write errors" "$T/publish4.log" || fail "history errors not counted"
[ -z "$(ls -A "$T/hist")" ] || fail "partial history files left: $(ls -A "$T/hist")"
check_buffers "$T/traj/step-0003.safetensors" "$SHM.h" || fail "publishing stopped on a full disk"
"$BFP" publish $AUTH --dir "$T/traj" --listen 127.0.0.1:$port --history "$T/nonexistent" \
	> "$T/publish5.log" 2>&1 && fail "an unwritable history directory was accepted"
grep -q "history.*No such file" "$T/publish5.log" || fail "no clear error for the history directory"
echo "ok - history on a full disk reported without stopping, an unwritable one refused"
