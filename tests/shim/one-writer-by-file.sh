#!/bin/sh
# one-writer-by-file.sh BFPATCH SHIM (set-up in lib.sh):
# one shim per buffer file, whatever names it: with a shim on $SHM.a, a
# second one (plain and with --init) through the same path, a symbolic
# link, a hard link, a relative path, a path through "..", and a bind
# mount of the file is refused at start: a non-zero exit and a message
# naming the path and the first shim's pid. The first shim then still
# commits a published version bit-exact. Without mount(8) rights the
# bind mount case alone is skipped, and said.
set -u
. "$(dirname "$0")/lib.sh"
traj5
BOUND=""
test_teardown() {
	[ -n "$BOUND" ] && umount "$BOUND"
	return 0
}

start_shim a --init "$T/traj5/step-0000.safetensors" --upstream 127.0.0.1:$port \
	--listen 127.0.0.1:$((port + 30)) --exit-after 60
A=$!

ln -s "$SHM.a" "$SHM.sym" || fail "symlink"
ln "$SHM.a" "$SHM.hard" || fail "hard link"
shim_abs=$(cd "$(dirname "$SHIM")" && pwd)/$(basename "$SHIM") # run from elsewhere
shm_dir=$(dirname "$SHM")
shm_base=$(basename "$SHM")
mkdir "$T/bound-dir" && : > "$T/bound-dir/buf" || fail "bind mount point"
if mount --bind "$SHM.a" "$T/bound-dir/buf" 2>"$T/mount.err"; then
	BOUND=$T/bound-dir/buf
else
	echo "note: bind mount not permitted here ($(cat "$T/mount.err")): that case skipped"
fi

# second PATH [ARGS]: a second shim on PATH, run from $shm_dir (for the
# relative path), must exit non-zero at start, naming PATH and shim a
tries=0
second() {
	path=$1
	shift
	tries=$((tries + 1))
	log=$T/second$tries.log
	(cd "$shm_dir" && exec "$shim_abs" $AUTH --buffer "$path" "$@" --upstream 127.0.0.1:$port \
		--listen 127.0.0.1:$((port + 31)) --exit-after 3) > "$log" 2>&1
	rc=$?
	[ $rc -ne 0 ] || fail "a second shim on $path${*:+ $*} ran (exit 0): $(cat "$log")"
	grep -q "listening on" "$log" && fail "a second shim on $path $* started listening"
	grep -qF "$path" "$log" || fail "the refusal does not name $path: $(cat "$log")"
	grep -q "locked by its writer, process $A (bfpatch-shim)" "$log" ||
		fail "the refusal does not name shim a (pid $A): $(cat "$log")"
	echo "ok - refused through $path${*:+ $*} (exit $rc): $(head -n 1 "$log")"
}
for p in "$SHM.a" "$SHM.sym" "$SHM.hard" "$shm_base.a" "$shm_dir/../$(basename "$shm_dir")/$shm_base.a" \
	${BOUND:+"$BOUND"}; do
	second "$p"
	second "$p" --init "$T/traj5/step-0000.safetensors"
done
kill -0 "$A" 2>/dev/null || fail "shim a ended"

"$BFP" publish $AUTH --dir "$T/traj5" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 2 \
	--linger 2 > "$T/publish30.log" 2>&1 || fail "publish to shim a"
wait_line "committed version 1 -> 2" "$T/shima.log" || fail "shim a did not commit version 2"
kill -TERM $PIDS; wait; PIDS=""
check_buffers "$T/traj5/step-0002.safetensors" "$SHM.a" || fail "shim a's buffer"
how="a bind mount among them"
[ -n "$BOUND" ] || how="no bind mount: not permitted here"
echo "ok - one writer per buffer file: $tries second shims refused ($how), shim a bit-exact"
