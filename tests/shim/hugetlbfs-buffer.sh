#!/bin/sh
# hugetlbfs-buffer.sh BFPATCH SHIM (set-up in lib.sh):
# a weight buffer on hugetlbfs (where files take no write(2) and come in
# whole huge pages): --init makes it through a mapping, its journals are
# whole pages, and three patches commit bit-exact; where no huge pages
# can be had, skipped (77)
set -u
. "$(dirname "$0")/lib.sh"
traj5
# the mount and the huge pages it takes are given back however it ends
HP_MOUNT="" HP_WAS=""
test_teardown() {
	if [ -n "$HP_MOUNT" ]; then
		rm -f "$HP_MOUNT"/*
		umount "$HP_MOUNT"
	fi
	[ -n "$HP_WAS" ] && echo "$HP_WAS" > /proc/sys/vm/nr_hugepages 2>/dev/null
	return 0
}

hp_was=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo)
[ -n "$hp_was" ] && HP_WAS=$hp_was
if [ -n "$hp_was" ] && mkdir "$T/hp" && echo $((hp_was + 8)) > /proc/sys/vm/nr_hugepages 2>/dev/null &&
	[ "$(cat /proc/sys/vm/nr_hugepages)" -ge $((hp_was + 8)) ] &&
	mount -t hugetlbfs none "$T/hp" 2>/dev/null; then
	HP_MOUNT=$T/hp
	"$SHIM" $AUTH --buffer "$T/hp/buf" --init "$T/traj5/step-0000.safetensors" \
		--upstream 127.0.0.1:$port --listen 127.0.0.1:$((port + 48)) --exit-after 40 \
		> "$T/shimhp.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_line "listening on" "$T/shimhp.log" ||
		fail "a shim on hugetlbfs did not start: $(cat "$T/shimhp.log")"
	"$BFP" publish $AUTH --dir "$T/traj5" --listen 127.0.0.1:$port --wait-subscribers 1 --steps 3 \
		--linger 2 > "$T/publish48.log" 2>&1 || fail "publish to a shim on hugetlbfs"
	wait_line "committed version 2 -> 3" "$T/shimhp.log" || fail "no commits on hugetlbfs"
	kill -TERM $PIDS; wait; PIDS=""
	check_buffers "$T/traj5/step-0003.safetensors" "$T/hp/buf" || fail "a buffer on hugetlbfs"
else
	echo "skip: no hugetlbfs with huge pages here"
	exit 77
fi
echo "ok - a weight buffer on hugetlbfs: three patches committed bit-exact"
