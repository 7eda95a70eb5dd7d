#!/bin/sh
# undo-journal-no-room.sh BFPATCH SHIM (set-up in lib.sh):
# a shim whose buffer's file system has no room for its undo journal (a
# small tmpfs, as a full /dev/shm) refuses to start and says so, and
# leaves no journal behind; a journal that was there and had to grow
# (more apply threads) keeps its size. The tmpfs is mounted in a private
# mount namespace, so nothing outlives the test; without one (no root),
# skipped (77).
set -u
if [ -z "${BFP_PRIVATE_MOUNTS:-}" ]; then
	unshare -m true 2>/dev/null || { echo "skipped: no private mount namespace"; exit 77; }
	BFP_PRIVATE_MOUNTS=1 exec unshare -m "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
test_teardown() { umount "$T/full" 2>/dev/null; return 0; }

"$BFP" synth -o "$T/s" -p 300k -n 0 -S 3 2>/dev/null || fail synth
mkdir "$T/full"
# 220 pages: the buffer (139) and a journal of one apply thread (54),
# not one of two (107)
mount -t tmpfs -o size=880k tmpfs "$T/full" || fail "mount tmpfs"
B=$T/full/buf
shim() {
	"$SHIM" ${AUTH:-} --buffer "$B" --init "$T/s/step-0000.safetensors" \
		--upstream 127.0.0.1:1 --listen 127.0.0.1:$((port + 40)) --exit-after 0.2 "$@"
}

shim --threads 2 > "$T/two.log" 2>&1 && fail "a shim started without room for its journal"
grep -q "undo journal: .*cannot reserve" "$T/two.log" || fail "no clear error: $(cat "$T/two.log")"
[ -e "$B.undo" ] && fail "a journal it could not reserve was left behind"

shim --threads 1 > "$T/one.log" 2>&1 || fail "a shim with room for its journal: $(cat "$T/one.log")"
size=$(stat -c %s "$B.undo")
shim --threads 2 > "$T/grow.log" 2>&1 && fail "a journal grew past the room there is"
grep -q "cannot reserve" "$T/grow.log" || fail "no clear error: $(cat "$T/grow.log")"
[ "$(stat -c %s "$B.undo")" = "$size" ] || fail "a journal that could not grow kept the growth"
echo "ok - no room for the undo journal: refused, said, nothing left behind"
